"""Manifests that run ``fwx serve`` on engines users already have: KServe and plain Kubernetes.

No orchestration of our own: ``kserve.py`` and ``k8s.py`` build Python dicts
(the Kubernetes objects) and dump them as YAML; ``common.py`` holds what both
share (the container, its probes, its security settings, the grace period).
Nothing here imports a framework or the server.
"""
