"""Test only: on the PYTHONPATH of the ``fwx serve`` a test starts (tests/hardening/test_worker_walls.py).

``FWX_TEST_LIKE_DOCKER=1``: the whole server runs as under Docker's default seccomp profile (``unshare``
fails with EPERM: no namespaces). ``FWX_TEST_WALLS_CFG``: arm the payload in worker 0.
"""

import os

if os.environ.get("FWX_TEST_LIKE_DOCKER") == "1":
    from fwx.safety import seccomp

    seccomp.install({"unshare": 1})
if os.environ.get("FWX_TEST_WALLS_CFG"):
    import worker_walls_payload

    worker_walls_payload.install()
