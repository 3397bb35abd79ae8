"""``fwx dockerize``: a Dockerfile for one artifact repository, with only the runtimes it needs.

The image bakes the repository into ``/models`` so it is one artifact to ship;
the per-format extras come from what the server would actually load under the
``--prefer`` order, so an ONNX-only repository gets an ONNX-only image. The
dependencies go into a layer of their own, keyed by the dependency list alone,
so a new model or a new fwx wheel rebuilds only the small layers above it.
"""

from __future__ import annotations

import base64
import hashlib
import io
import re
import shlex
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from fwx import __version__
from fwx.deploy.common import check_image
from fwx.errors import InputError, UsageError
from fwx.formats import Format
from fwx.machine import write_atomic
from fwx.repository import Repository
from fwx.runtimes.base import runtime_entry
from fwx.serving.config import DEFAULT_PREFER

DIST_NAME = "fwx-toolkit"  # "fwx" on PyPI is an unrelated package
WHEEL_GLOB = DIST_NAME.replace("-", "_") + "-*.whl"  # wheel file names spell the distribution with "_"
WHEEL_DIR = ".fwx-wheels"  # inside the build context; hidden, so the server never sees it as a model
DEPS_DIR = f"{WHEEL_DIR}/deps"  # the placeholder wheel that carries only fwx's requirements
DEPS_WHEEL = WHEEL_GLOB.replace("*", "0-py3-none-any")
TORCH_INDEX_CPU = "https://download.pytorch.org/whl/cpu"
BASE_CPU = "python:3.11.14-slim-bookworm"
BASE_GPU = "nvidia/cuda:12.8.1-cudnn-runtime-ubuntu24.04"
#: A wheel's file name as PEP 427 spells it; it lands inside a quoted ARG of the Dockerfile.
WHEEL_NAME = re.compile(r"fwx_toolkit-[A-Za-z0-9_.!+]+(-[A-Za-z0-9_.]+){3}\.whl")


@dataclass
class DockerizePlan:
    repository: Path
    extras: list[str]
    served: dict[str, str] = field(default_factory=dict)  # model/version -> format
    gpu: bool = False
    tag: str = "fwx-models:latest"
    wheel: str = WHEEL_GLOB.replace("*", f"{__version__}-py3-none-any")  # file name under WHEEL_DIR

    @property
    def extras_spec(self) -> str:
        """The extras the image installs: the server's and the runtimes the models need."""
        return ",".join(["serve", *self.extras, *(["gpu"] if self.gpu else [])])

    @property
    def pip_spec(self) -> str:
        """What the dependency layer installs: the placeholder wheel with the extras the models need."""
        return f"{DEPS_WHEEL}[{self.extras_spec}]"

    def to_json(self) -> dict[str, object]:
        return {
            "repository": str(self.repository),
            "extras": self.extras,
            "served": self.served,
            "gpu": self.gpu,
            "pip_spec": self.pip_spec,
            "build": self.build_command(),
            "run": self.run_command(),
        }

    def build_command(self) -> str:
        return f"docker build -t {shlex.quote(self.tag)} {shlex.quote(str(self.repository))}"

    def run_command(self) -> str:
        gpus = "--gpus all " if self.gpu else ""
        dev = " --device cuda" if self.gpu else ""
        return f"docker run --rm {gpus}-p 127.0.0.1:8000:8000 -p 127.0.0.1:8001:8001 {shlex.quote(self.tag)}{dev}"


def plan_image(
    repository: str | Path,
    *,
    prefer: tuple[Format, ...] = DEFAULT_PREFER,
    gpu: bool = False,
    tag: str = "fwx-models:latest",
) -> DockerizePlan:
    check_image(tag, "--tag")  # written into the Dockerfile's comments and the printed shell lines
    repo = Repository(repository)
    if not str(repo.root).isprintable():
        raise UsageError(
            f"{str(repo.root)!r} holds control characters", hint="rename the folder; its path goes into the Dockerfile"
        )
    if not repo.root.is_dir():
        raise InputError(f"{repo.root} is not a folder", hint="pass the folder `fwx export --out` wrote")
    served: dict[str, str] = {}
    for name in repo.models():
        for version in repo.versions(name):
            formats = {Format(e.format) for e in repo.manifest(name, version).artifacts.values() if e.status == "ok"}
            choice = next((f for f in prefer if f in formats), None)
            if choice is not None:
                served[f"{name}/{version}"] = choice.value
    if not served:
        raise InputError(
            f"{repo.root} holds no servable model version",
            hint="export a model first: fwx export MODEL --to onnx --out " + str(repo.root),
        )
    extras = sorted({runtime_entry(Format(f)).extra for f in served.values()})
    return DockerizePlan(repo.root, extras, served, gpu, tag)


def render_dockerfile(plan: DockerizePlan) -> str:
    base = BASE_GPU if plan.gpu else BASE_CPU
    py = "python3" if plan.gpu else "python"
    apt = (
        "# hadolint ignore=DL3008\nRUN apt-get update \\\n"
        "    && apt-get install -y --no-install-recommends python3 python3-venv \\\n"
        "    && rm -rf /var/lib/apt/lists/*\n"
    )
    # PyPI's Linux torch wheels are CUDA builds: the CPU image takes torch from the CPU index (an ARG, so a
    # machine that cannot reach it can name a mirror).
    torch_arg = "" if plan.gpu else f"ARG TORCH_INDEX={TORCH_INDEX_CPU}\n"
    torch_index = "" if plan.gpu else ' --extra-index-url "${TORCH_INDEX}"'
    return f"""# syntax=docker/dockerfile:1
# Generated by `fwx dockerize` (fwx {__version__}). Serves the models in this folder.
# Build: {plan.build_command()}
# Run:   {plan.run_command()}
ARG BASE_IMAGE={base}

FROM ${{BASE_IMAGE}} AS build
{torch_arg}ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 DEBIAN_FRONTEND=noninteractive
{apt if plan.gpu else ""}# The dependencies first, from a placeholder {DIST_NAME} wheel that holds only fwx's requirements:
# this layer is keyed by the dependency list and the extras, so new models or a new fwx reuse it.
COPY {DEPS_DIR}/ /tmp/fwx-deps/
RUN {py} -m venv /opt/fwx \\
    && /opt/fwx/bin/pip install{torch_index} "/tmp/fwx-deps/{plan.pip_spec}"
# fwx itself: the wheel `fwx dockerize` built from its checkout (the distribution is not taken from an index).
COPY {WHEEL_DIR}/{plan.wheel} /tmp/fwx-wheel/
RUN /opt/fwx/bin/pip install --no-deps --force-reinstall "/tmp/fwx-wheel/{plan.wheel}" \\
    && /opt/fwx/bin/fwx --version
COPY . /models
RUN rm -rf /models/{WHEEL_DIR}

FROM ${{BASE_IMAGE}}
ENV DEBIAN_FRONTEND=noninteractive
{apt.replace(" python3-venv", "") if plan.gpu else ""}RUN (userdel -r ubuntu 2>/dev/null || true) \\
    && useradd --uid 1000 --user-group --no-create-home --shell /usr/sbin/nologin fwx
ENV PATH=/opt/fwx/bin:$PATH PYTHONUNBUFFERED=1
COPY --from=build /opt/fwx /opt/fwx
COPY --from=build --chown=1000:1000 /models /models
USER 1000:1000
EXPOSE 8000 8001
HEALTHCHECK --interval=10s --timeout=3s --start-period=60s --retries=3 \\
  CMD ["{py}", "-c", "import sys,urllib.request;sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8000/v2/health/ready',timeout=2).status==200 else 1)"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["fwx", "serve", "/models", "--host", "0.0.0.0", "--http-port", "8000", "--grpc-port", "8001"]
CMD []
"""


DOCKERIGNORE = """# Generated by `fwx dockerize`: only model versions go into the image.
**/.fwx-tmp-*
**/__pycache__
Dockerfile
.dockerignore
"""


def checkout_root() -> Path | None:
    """The source checkout this fwx runs from (an editable or in-tree install), if any."""
    root = Path(__file__).resolve().parents[1]
    pyproject = root / "pyproject.toml"
    if pyproject.is_file() and f'name = "{DIST_NAME}"' in pyproject.read_text(encoding="utf-8"):
        return root
    return None


def build_wheel(dest: Path, *, wheel: Path | None = None) -> Path:
    """Put fwx's wheel into ``dest``: the one given, or one built from this checkout with pip."""
    dest.mkdir(parents=True, exist_ok=True)
    if wheel is not None:
        if not (wheel.is_file() and wheel.match(WHEEL_GLOB)):
            raise InputError(
                f"{wheel} is not an fwx_toolkit wheel",
                hint="build one with: pip wheel --no-deps -w dist PATH/TO/fwx-checkout",
            )
        return Path(shutil.copy2(wheel, dest / wheel.name))
    root = checkout_root()
    if root is None:
        raise InputError(
            "this fwx was not installed from a source checkout, so no wheel can be built for the image",
            hint="pass --wheel PATH/TO/fwx_toolkit-*.whl",
        )
    for old in dest.glob(WHEEL_GLOB):
        old.unlink()
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dest), str(root)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    built = sorted(dest.glob(WHEEL_GLOB))
    if proc.returncode != 0 or not built:
        last = (proc.stderr.strip().splitlines() or ["no wheel written"])[-1]
        raise InputError(
            f"building fwx's wheel from {root} failed: {last}",
            hint="build it yourself (pip wheel --no-deps -w dist .) and pass --wheel",
        )
    return built[-1]


def write_deps_wheel(wheel: Path, dest: Path) -> Path:
    """A placeholder fwx wheel in ``dest`` with ``wheel``'s requirements and nothing else.

    Its bytes depend on the dependency list alone (fixed version, names, order and timestamps), so the
    image layer that installs from it is rebuilt only when a requirement changes.
    """
    with zipfile.ZipFile(wheel) as zf:
        meta = next((n for n in zf.namelist() if n.endswith(".dist-info/METADATA")), None)
        if meta is None:
            raise InputError(f"{wheel.name} holds no METADATA", hint="pass a wheel built by pip wheel")
        headers = zf.read(meta).decode("utf-8").split("\n\n", 1)[0].splitlines()
    kept = [line for line in headers if line.startswith(("Requires-Python:", "Provides-Extra:", "Requires-Dist:"))]
    info = "fwx_toolkit-0.dist-info"
    files = {
        f"{info}/METADATA": "\n".join(["Metadata-Version: 2.1", f"Name: {DIST_NAME}", "Version: 0", *kept]) + "\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: fwx dockerize\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = [f"{name},sha256={_urlsafe_digest(text)},{len(text.encode())}" for name, text in files.items()]
    files[f"{info}/RECORD"] = "\n".join([*record, f"{info}/RECORD,,"]) + "\n"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, text in files.items():
            entry = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            entry.external_attr = 0o644 << 16
            zf.writestr(entry, text, compress_type=zipfile.ZIP_DEFLATED)
    dest.mkdir(parents=True, exist_ok=True)
    out = dest / DEPS_WHEEL
    write_atomic(out, buf.getvalue())
    return out


def _urlsafe_digest(text: str) -> str:
    """A RECORD hash as wheels spell it (PEP 376: urlsafe base64 without padding)."""
    return base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()


def write_docker_files(plan: DockerizePlan, *, force: bool = False, wheel: Path | None = None) -> list[Path]:
    out = [plan.repository / "Dockerfile", plan.repository / ".dockerignore"]
    for path in out:
        # --force replaces a file fwx could have written; never a folder, and never through a link that
        # points outside the repository
        if path.is_symlink() or (path.exists() and not path.is_file()):
            raise InputError(
                f"{path} exists and is not a regular file", hint="move it away; --force only replaces files"
            )
        if path.exists() and not force:
            raise InputError(f"{path} already exists", hint="pass --force to overwrite it")
    built = build_wheel(plan.repository / WHEEL_DIR, wheel=wheel)
    if not WHEEL_NAME.fullmatch(built.name):
        raise InputError(f"{built.name!r} is not a wheel file name", hint="pass a wheel named as pip writes them")
    plan.wheel = built.name
    deps = write_deps_wheel(built, plan.repository / DEPS_DIR)
    for path, text in zip(out, (render_dockerfile(plan), DOCKERIGNORE), strict=True):
        write_atomic(path, text)  # a reader never sees half a Dockerfile
    return [*out, built, deps]
