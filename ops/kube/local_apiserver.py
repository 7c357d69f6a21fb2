#!/usr/bin/env python3
"""A real Kubernetes API server on loopback: etcd + kube-apiserver, for tests and local use.

Standard library only (plus the `openssl` command, for the certificates), so it works
without the project's virtualenv:

    python ops/kube/local_apiserver.py start|stop|run|status|binaries [--data-dir D]

or from Python:

    with LocalApiServer() as kube:
        kube.kubeconfig            # an admin kubeconfig (client certificate, system:masters)
        kube.request("GET", "/api/v1/namespaces")

What it sets up: a CA, a serving certificate for 127.0.0.1/localhost, an admin client
certificate, a service-account signing key (so TokenRequest works: `create_token`), RBAC
authorization, and the CustomResourceDefinitions the bridge watches (minimal schemas that
keep unknown fields, with the status subresource).

The binaries come from $KUBEBUILDER_ASSETS (a folder holding `kube-apiserver` and `etcd`,
the convention of controller-runtime's envtest); when it is unset, from a cache under
${FAULTLINE_CACHE:-~/.cache/faultline}, built there once with Go from the pinned modules in
ops/kube/gomod (about 11 minutes on 2 cores; this says so before it starts).
"""
from __future__ import annotations

import argparse
import base64
import http.client
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any

HERE = Path(__file__).resolve().parent
GOMOD = HERE / "gomod"
HOST = "127.0.0.1"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"


class ApiServerError(RuntimeError):
    """Something went wrong; the message says what and how to fix it."""


# --- binaries ---------------------------------------------------------------------------------


def _pinned(module_dir: Path, module: str) -> str:
    """The version of `module` required by ops/kube/gomod/<dir>/go.mod (the single pin)."""
    text = (GOMOD / module_dir / "go.mod").read_text()
    found = re.search(rf"^require {re.escape(module)} (v\S+)$", text, re.M)
    if not found:
        raise ApiServerError(f"{GOMOD / module_dir / 'go.mod'} does not require {module}")
    return found.group(1)


def kube_version() -> str:
    return _pinned(Path("kube-apiserver"), "k8s.io/kubernetes")


def etcd_version() -> str:
    return _pinned(Path("etcd"), "go.etcd.io/etcd/server/v3")


def cache_root() -> Path:
    return Path(os.environ.get("FAULTLINE_CACHE") or Path.home() / ".cache" / "faultline")


def assets_dir() -> Path:
    """Where the built (or unpacked) binaries of the pinned versions are cached."""
    return cache_root() / f"kube-{kube_version()}-etcd-{etcd_version()}"


BINARIES = ("kube-apiserver", "etcd")
# The packages built, per module folder of ops/kube/gomod.
BUILDS = {"kube-apiserver": ("kube-apiserver", "k8s.io/kubernetes/cmd/kube-apiserver"), "etcd": ("etcd", "go.etcd.io/etcd/server/v3")}
BUILD_ESTIMATE = "about 11 minutes on 2 cores, 155 MB of module downloads and 3 GB of Go build cache; later builds take 10-30 s"


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def ensure_binaries(*, log: Any = None) -> Path:
    """The folder holding `kube-apiserver` and `etcd`: $KUBEBUILDER_ASSETS when set, else
    the cache, built with Go first if it is not there yet."""
    say = log or (lambda message: print(message, file=sys.stderr, flush=True))
    given = os.environ.get("KUBEBUILDER_ASSETS")
    if given:
        folder = Path(given)
        missing = [name for name in BINARIES if not _executable(folder / name)]
        if missing:
            raise ApiServerError(
                f"KUBEBUILDER_ASSETS={given} has no executable {' or '.join(missing)}: point it at a folder holding "
                f"kube-apiserver and etcd (e.g. unpacked from a release), or unset it to build them with Go into {assets_dir()}"
            )
        return folder
    folder = assets_dir()
    if (folder / ".complete").exists() and all(_executable(folder / name) for name in BINARIES):
        return folder
    go = shutil.which("go")
    if go is None:
        raise ApiServerError(
            "KUBEBUILDER_ASSETS is unset and kube-apiserver/etcd are not built yet, and `go` is not on PATH: "
            "install Go 1.26 (https://go.dev/dl/) to build them once, or set KUBEBUILDER_ASSETS to a folder holding "
            "kube-apiserver and etcd"
        )
    say(
        f"KUBEBUILDER_ASSETS is unset: building kube-apiserver {kube_version()} and etcd {etcd_version()} with Go into "
        f"{folder} (once; {BUILD_ESTIMATE})"
    )
    started = time.monotonic()
    _build(go, folder)
    say(f"built kube-apiserver and etcd in {time.monotonic() - started:.0f}s into {folder}")
    return folder


def _build(go: str, folder: Path, builds: dict[str, tuple[str, str]] = BUILDS, ldflags: str = "-s -w") -> None:
    """Build into a private folder, then rename it, so a concurrent run never sees half a build."""
    tmp = folder.parent / f"{folder.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    # Go's own toolchain, never a download of another (v1.37 asks for go >= 1.26.0);
    # static binaries, as upstream releases them.
    env = {**os.environ, "GOTOOLCHAIN": "local", "CGO_ENABLED": "0", "GOFLAGS": "-mod=readonly"}
    try:
        for module_dir, (name, package) in builds.items():
            work = tmp / "src" / module_dir
            shutil.copytree(GOMOD / module_dir, work)
            cmd = [go, "build", "-trimpath", "-ldflags", ldflags, "-o", str(tmp / name), package]
            res = subprocess.run(cmd, cwd=work, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True)
            if res.returncode != 0:
                tail = "\n".join((res.stdout + res.stderr).strip().splitlines()[-30:])
                raise ApiServerError(
                    f"building {name} failed (exit {res.returncode}); is the Go module proxy reachable, and is Go >= 1.26?\n"
                    f"$ (cd {work} && {' '.join(cmd)})\n{tail}"
                )
        shutil.rmtree(tmp / "src")
        (tmp / ".complete").write_text("".join(f"{name} {etcd_version() if name == 'etcd' else kube_version()}\n" for name, _ in builds.values()))
        if folder.exists() and not (folder / ".complete").exists():
            shutil.rmtree(folder, ignore_errors=True)  # leftover of an interrupted older run
        try:
            os.rename(tmp, folder)
        except OSError:  # another process finished first; its build is as good as ours
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


# --- kube-controller-manager: the real controllers, for the tests that need them --------------

CONTROLLER_MANAGER = "kube-controller-manager"
# From the same pinned module graph as kube-apiserver (gomod/kube-apiserver/tools.go lists
# it); the version stamped in, so that `--version` says what it is.
CONTROLLER_MANAGER_BUILD = {"kube-apiserver": (CONTROLLER_MANAGER, "k8s.io/kubernetes/cmd/kube-controller-manager")}
CONTROLLER_MANAGER_ESTIMATE = "about 6 minutes on 2 cores once kube-apiserver was built (a warm Go cache), 12-25 without"


def controller_manager_dir() -> Path:
    """Where kube-controller-manager of the pinned version is cached (built, or unpacked by .ci/run)."""
    return cache_root() / f"{CONTROLLER_MANAGER}-{kube_version()}"


def find_controller_manager(*, build: bool = True, log: Any = None) -> Path | None:
    """The kube-controller-manager binary: in $KUBEBUILDER_ASSETS when it holds one, else
    in `controller_manager_dir()`, else built there with Go (when `build` and Go is on
    PATH). None when there is none and it cannot be built."""
    say = log or (lambda message: print(message, file=sys.stderr, flush=True))
    given = os.environ.get("KUBEBUILDER_ASSETS")
    if given and _executable(Path(given) / CONTROLLER_MANAGER):
        return Path(given) / CONTROLLER_MANAGER
    folder = controller_manager_dir()
    if (folder / ".complete").exists() and _executable(folder / CONTROLLER_MANAGER):
        return folder / CONTROLLER_MANAGER
    go = shutil.which("go")
    if not build or go is None:
        return None
    say(f"building {CONTROLLER_MANAGER} {kube_version()} with Go into {folder} (once; {CONTROLLER_MANAGER_ESTIMATE})")
    started = time.monotonic()
    version = kube_version()
    major, minor = version.lstrip("v").split(".")[:2]
    stamp = " ".join(f"-X k8s.io/component-base/version.{k}={v}" for k, v in (("gitVersion", version), ("gitMajor", major), ("gitMinor", minor)))
    _build(go, folder, CONTROLLER_MANAGER_BUILD, f"-s -w {stamp}")
    say(f"built {CONTROLLER_MANAGER} in {time.monotonic() - started:.0f}s into {folder}")
    return folder / CONTROLLER_MANAGER


# --- certificates -----------------------------------------------------------------------------


def _openssl(*args: str, cwd: Path) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        raise ApiServerError("openssl not found: install it (e.g. `apt-get install openssl`) to generate the certificates")
    res = subprocess.run([openssl, *args], cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if res.returncode != 0:
        raise ApiServerError(f"openssl {' '.join(args)} failed (exit {res.returncode}):\n{res.stderr.strip()}")


def make_ca(folder: Path, name: str = "ca", subject: str = "/CN=faultline-test-ca") -> tuple[Path, Path]:
    """A self-signed CA: (certificate, key)."""
    folder.mkdir(parents=True, exist_ok=True)
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "3650", "-subj", subject,
        "-keyout", f"{name}.key", "-out", f"{name}.crt",
        "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        cwd=folder,
    )
    return folder / f"{name}.crt", folder / f"{name}.key"


def make_cert(folder: Path, name: str, subject: str, ca: tuple[Path, Path], extensions: str) -> tuple[Path, Path]:
    """A certificate signed by `ca`: (certificate, key)."""
    ext = folder / f"{name}.ext"
    ext.write_text(extensions + "\nsubjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid,issuer\n")
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", subject, "-keyout", f"{name}.key", "-out", f"{name}.csr", cwd=folder)
    _openssl(
        "x509", "-req", "-in", f"{name}.csr", "-CA", str(ca[0]), "-CAkey", str(ca[1]), "-CAcreateserial",
        "-days", "3650", "-out", f"{name}.crt", "-extfile", ext.name,
        cwd=folder,
    )
    return folder / f"{name}.crt", folder / f"{name}.key"


def _certificates(folder: Path) -> None:
    if (folder / ".complete").exists():
        return
    ca = make_ca(folder)
    make_cert(folder, "serving", "/CN=kube-apiserver", ca,
              "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\nkeyUsage=critical,digitalSignature,keyEncipherment")
    make_cert(folder, "admin", "/O=system:masters/CN=faultline-admin", ca,
              "extendedKeyUsage=clientAuth\nkeyUsage=critical,digitalSignature,keyEncipherment")
    _openssl("genrsa", "-out", "service-account.key", "2048", cwd=folder)
    _openssl("rsa", "-in", "service-account.key", "-pubout", "-out", "service-account.pub", cwd=folder)
    (folder / ".complete").write_text("ok\n")


# --- the CustomResourceDefinitions the bridge watches ------------------------------------------

# (group, kind, plural, served versions, storage version)
CRDS = (
    ("jobset.x-k8s.io", "JobSet", "jobsets", ("v1alpha2",), "v1alpha2"),
    ("kueue.x-k8s.io", "Workload", "workloads", ("v1beta1", "v1beta2"), "v1beta2"),
    ("ray.io", "RayJob", "rayjobs", ("v1",), "v1"),
    ("kubeflow.org", "PyTorchJob", "pytorchjobs", ("v1",), "v1"),
    ("kubeflow.org", "TFJob", "tfjobs", ("v1",), "v1"),
    ("kubeflow.org", "MPIJob", "mpijobs", ("v1", "v2beta1"), "v2beta1"),
    ("kubeflow.org", "JAXJob", "jaxjobs", ("v1",), "v1"),
    ("trainer.kubeflow.org", "TrainJob", "trainjobs", ("v1alpha1",), "v1alpha1"),
    ("leaderworkerset.x-k8s.io", "LeaderWorkerSet", "leaderworkersets", ("v1",), "v1"),
)


def crd(group: str, kind: str, plural: str, versions: tuple[str, ...], storage: str) -> dict[str, Any]:
    """A minimal CRD: any spec and status are kept; status only through /status, as the real operators' CRDs."""
    schema = {
        "openAPIV3Schema": {
            "type": "object",
            "properties": {
                "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            },
        }
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"kind": kind, "plural": plural, "singular": kind.lower(), "listKind": f"{kind}List"},
            "versions": [
                {"name": v, "served": True, "storage": v == storage, "schema": schema, "subresources": {"status": {}}}
                for v in versions
            ],
        },
    }


# --- processes --------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def _pid_alive(pid: int, name: str) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    proc = Path(f"/proc/{pid}")
    if proc.exists():  # Linux: a zombie is dead, and a recycled pid is not ours
        try:
            if (proc / "stat").read_text().split(")")[-1].split()[0] == "Z":
                return False
            return name.encode() in (proc / "cmdline").read_bytes()
        except OSError:
            return False
    return True


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").strip().splitlines()[-lines:])
    except OSError:
        return "(no output)"


class LocalApiServer:
    """etcd and kube-apiserver in child processes, on loopback ports.

    data_dir: certificates, etcd data, logs, pid files and kubeconfig (default: a fresh
    temp dir, deleted by stop()). A given data_dir keeps etcd's data across restarts.
    compaction_interval: kube-apiserver's --etcd-compaction-interval (5m by default, as upstream).
    detach: start the processes in their own session so they outlive this process (the CLI's `start`).
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str] | None = None,
        *,
        compaction_interval: str = "5m",
        start_timeout: float = 60.0,
        stop_timeout: float = 20.0,
        install_crds: bool = True,
        detach: bool = False,
        extra_args: tuple[str, ...] = (),
    ) -> None:
        self._owns_dir = data_dir is None
        self.data_dir = Path(data_dir) if data_dir is not None else Path(tempfile.mkdtemp(prefix="faultline-kube-"))
        self.compaction_interval = compaction_interval
        self.start_timeout, self.stop_timeout = start_timeout, stop_timeout
        self.install_crds, self.detach = install_crds, detach
        self.extra_args = extra_args
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self.binaries: Path | None = None
        self._connections = threading.local()  # keep-alive connections, one set per thread
        self._cached_state: dict[str, Any] | None = None  # state.json: ports and pids

    # --- files ---

    @property
    def certs(self) -> Path:
        return self.data_dir / "pki"

    @property
    def ca_file(self) -> Path:
        return self.certs / "ca.crt"

    @property
    def kubeconfig(self) -> Path:
        """The admin kubeconfig (client certificate in system:masters)."""
        return self.data_dir / "kubeconfig"

    def log_file(self, name: str) -> Path:
        return self.data_dir / f"{name}.log"

    def _state(self) -> dict[str, Any]:
        if self._cached_state is None:
            try:
                self._cached_state = json.loads((self.data_dir / "state.json").read_text())
            except (OSError, ValueError):
                return {}
        return self._cached_state

    def _save_state(self, **values: Any) -> None:
        state = {**self._state(), **values}
        (self.data_dir / "state.json").write_text(json.dumps(state) + "\n")
        self._cached_state = state

    @property
    def url(self) -> str:
        return f"https://{HOST}:{self._state()['apiserver_port']}"

    @property
    def etcd_url(self) -> str:
        return f"http://{HOST}:{self._state()['etcd_port']}"

    def pid(self, name: str) -> int | None:
        pid = self._state().get(f"{name}_pid")
        return pid if isinstance(pid, int) and _pid_alive(pid, name) else None

    def running(self) -> bool:
        return self.pid("kube-apiserver") is not None and self.pid("etcd") is not None

    # --- lifecycle ---

    def start(self) -> str:
        """Start etcd and the API server (or reuse the running ones); return the kubeconfig path."""
        if self.running():
            return str(self.kubeconfig)
        self.binaries = ensure_binaries()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        _certificates(self.certs)
        state = self._state()
        if self.pid("etcd") is None:
            self._save_state(etcd_port=free_port(), etcd_peer_port=free_port())
            self._start_etcd()
        if not state.get("apiserver_port"):
            self._save_state(apiserver_port=free_port())
        self._start_apiserver()
        self._write_kubeconfig()
        if self.install_crds:
            self.apply_crds()
        return str(self.kubeconfig)

    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        assert self.binaries is not None
        with open(self.log_file(name), "ab") as out:
            proc = subprocess.Popen(
                [str(self.binaries / name), *args], cwd=self.data_dir, stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, start_new_session=self.detach,
            )
        self._procs[name] = proc
        self._save_state(**{f"{name}_pid": proc.pid})
        return proc

    def _start_etcd(self) -> None:
        state = self._state()
        client, peer = f"http://{HOST}:{state['etcd_port']}", f"http://{HOST}:{state['etcd_peer_port']}"
        proc = self._spawn("etcd", [
            "--name", "default", "--data-dir", str(self.data_dir / "etcd"),
            "--listen-client-urls", client, "--advertise-client-urls", client,
            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer, "--initial-cluster", f"default={peer}",
            "--unsafe-no-fsync", "--log-level", "warn",
        ])
        self._wait("etcd", proc, lambda: self._etcd_healthy())

    def _etcd_healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.etcd_url}/health", timeout=2) as response:
                return json.loads(response.read()).get("health") == "true"
        except (OSError, ValueError):
            return False

    def _start_apiserver(self) -> None:
        c = self.certs
        args = [
            "--etcd-servers", self.etcd_url,
            "--bind-address", HOST, "--advertise-address", HOST, "--secure-port", str(self._state()["apiserver_port"]),
            # With a loopback advertise address the default endpoint reconciler refuses to start.
            "--endpoint-reconciler-type", "none",
            "--tls-cert-file", str(c / "serving.crt"), "--tls-private-key-file", str(c / "serving.key"),
            "--client-ca-file", str(c / "ca.crt"),
            "--service-account-issuer", SERVICE_ACCOUNT_ISSUER,
            "--service-account-key-file", str(c / "service-account.pub"),
            "--service-account-signing-key-file", str(c / "service-account.key"),
            "--service-cluster-ip-range", "10.0.0.0/24",
            "--authorization-mode", "RBAC",
            "--etcd-compaction-interval", self.compaction_interval,
            # On SIGTERM, end open watches within 2 s (the default waits for them up to a
            # minute): a restart in the tests then takes seconds.
            "--shutdown-watch-termination-grace-period", "2s",
            "--profiling=false",
            *self.extra_args,
        ]
        proc = self._spawn("kube-apiserver", args)
        self._wait("kube-apiserver", proc, self._ready)

    def _ready(self) -> bool:
        try:
            status, _ = self.request("GET", "/readyz", timeout=2)
        except OSError:
            return False
        return status == 200

    def _wait(self, name: str, proc: subprocess.Popen[bytes], ready: Any) -> None:
        deadline = time.monotonic() + self.start_timeout
        while not ready():
            code = proc.poll()
            if code is not None:
                raise ApiServerError(f"{name} exited with code {code} during start; see {self.log_file(name)}:\n{_tail(self.log_file(name))}")
            if time.monotonic() > deadline:
                self._terminate(name)
                raise ApiServerError(f"{name} was not ready within {self.start_timeout:.0f}s; see {self.log_file(name)}:\n{_tail(self.log_file(name))}")
            time.sleep(0.1)

    def restart_apiserver(self) -> None:
        """Stop the API server and start it again on the same port; etcd (and its data) stays."""
        self._terminate("kube-apiserver")
        self.binaries = self.binaries or ensure_binaries()
        self._start_apiserver()

    def stop_apiserver(self) -> None:
        self._terminate("kube-apiserver")

    def start_apiserver(self) -> None:
        self.binaries = self.binaries or ensure_binaries()
        self._start_apiserver()

    def start_controller_manager(self, controllers: tuple[str, ...] = ("job",), binary: Path | None = None) -> None:
        """Run kube-controller-manager against this server as its admin, with only
        `controllers` (e.g. the Job controller: pods for Jobs, their failures counted by
        the Job's podFailurePolicy), until `stop`. There is no kubelet or scheduler: a test
        binds pods and writes their status as a kubelet would."""
        binary = binary or find_controller_manager()
        if binary is None:
            raise ApiServerError(
                f"{CONTROLLER_MANAGER} {kube_version()} is not in $KUBEBUILDER_ASSETS nor in {controller_manager_dir()}, and Go "
                "is not on PATH to build it: install Go 1.26, or unpack a prebuilt copy there (ops/kube/README.md)"
            )
        name = CONTROLLER_MANAGER
        args = [
            "--kubeconfig", str(self.kubeconfig), "--controllers", ",".join(controllers), "--leader-elect=false",
            "--bind-address", HOST, "--secure-port", "0",
        ]  # fmt: skip
        with open(self.log_file(name), "ab") as out:
            proc = subprocess.Popen([str(binary), *args], cwd=self.data_dir, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
        self._procs[name] = proc
        self._save_state(**{f"{name}_pid": proc.pid})
        # Ready once its informers have listed what the controllers watch.
        self._wait(name, proc, lambda: b"Caches are synced" in self.log_file(name).read_bytes())

    def stop_controller_manager(self) -> None:
        self._terminate(CONTROLLER_MANAGER)

    def stop(self) -> None:
        """Stop the controller manager, the API server, then etcd. No-op for what is not running."""
        self._terminate(CONTROLLER_MANAGER)
        self._terminate("kube-apiserver")
        self._terminate("etcd")
        if self._owns_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def _terminate(self, name: str) -> None:
        pid = self.pid(name)
        proc = self._procs.pop(name, None)
        if pid is None:
            if proc is not None:
                proc.wait()  # reap
            return
        for sig, wait in ((signal.SIGTERM, self.stop_timeout), (signal.SIGKILL, 10.0)):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
            if proc is not None and proc.pid == pid:
                try:
                    proc.wait(timeout=wait)
                    return
                except subprocess.TimeoutExpired:
                    continue
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline:
                if not _pid_alive(pid, name):
                    return
                time.sleep(0.1)
        raise ApiServerError(f"could not stop {name} pid {pid}")

    # --- talking to it ---

    def ssl_context(self, cert: tuple[Path, Path] | None = None) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.ca_file))
        if cert is not None:
            context.load_cert_chain(str(cert[0]), str(cert[1]))
        return context

    def request(
        self, method: str, path: str, body: Any = None, *, token: str | None = None, timeout: float = 30,
        content_type: str = "application/json",
    ) -> tuple[int, Any]:
        """One API call as the admin (or with a bearer `token`): (HTTP status, decoded JSON body or text)."""
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            headers["Content-Type"] = content_type
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        while True:
            connection = self._connection(token is not None, timeout)
            reused = connection.sock is not None
            try:
                connection.request(method, path, body=data, headers=headers)
                response = connection.getresponse()
                status, raw = response.status, response.read()
                break
            except (http.client.RemoteDisconnected, ConnectionError, ssl.SSLEOFError):
                self._drop_connection(token is not None)
                if not reused:  # a kept-alive connection the server closed meanwhile (a restart) is opened again, once
                    raise
            except (http.client.HTTPException, OSError):
                self._drop_connection(token is not None)
                raise
        try:
            return status, json.loads(raw) if raw else None
        except ValueError:
            return status, raw.decode(errors="replace")

    def _connection(self, anonymous: bool, timeout: float) -> http.client.HTTPSConnection:
        """This thread's connection, as the admin or without a client certificate (for a
        bearer token), to the current port."""
        pool = self._connections.__dict__
        key = ("token" if anonymous else "admin", self.url)
        connection = pool.get(key)
        if connection is None:
            context = self.ssl_context() if anonymous else self.ssl_context((self.certs / "admin.crt", self.certs / "admin.key"))
            port = int(self._state()["apiserver_port"])
            connection = pool[key] = http.client.HTTPSConnection(HOST, port, timeout=timeout, context=context)
        connection.timeout = timeout
        if connection.sock is not None:
            connection.sock.settimeout(timeout)
        return connection

    def _drop_connection(self, anonymous: bool) -> None:
        connection = self._connections.__dict__.pop(("token" if anonymous else "admin", self.url), None)
        if connection is not None:
            connection.close()

    def call(self, method: str, path: str, body: Any = None, *, expect: tuple[int, ...] = (200, 201), **kwargs: Any) -> Any:
        """`request`, raising unless the status is one of `expect`."""
        status, answer = self.request(method, path, body, **kwargs)
        if status not in expect:
            message = answer.get("message") if isinstance(answer, dict) else answer
            raise ApiServerError(f"{method} {path}: HTTP {status}: {message}")
        return answer

    def apply_crds(self) -> None:
        """Create the CRDs (if missing) and wait until each is served."""
        for group, kind, plural, versions, storage in CRDS:
            self.call("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd(group, kind, plural, versions, storage), expect=(201, 409))
        deadline = time.monotonic() + self.start_timeout
        for group, _, plural, versions, _ in CRDS:
            for version in versions:
                while self.request("GET", f"/apis/{group}/{version}/{plural}?limit=1")[0] != 200:
                    if time.monotonic() > deadline:
                        raise ApiServerError(f"{plural}.{group}/{version} was not served within {self.start_timeout:.0f}s")
                    time.sleep(0.05)

    def create_token(
        self, namespace: str, service_account: str, *, pod: dict[str, Any] | None = None, expiration: int = 3600,
    ) -> str:
        """A TokenRequest token of a ServiceAccount; bound to `pod` (a Pod object as served) when given."""
        spec: dict[str, Any] = {"expirationSeconds": expiration}
        if pod is not None:
            spec["boundObjectRef"] = {"apiVersion": "v1", "kind": "Pod", "name": pod["metadata"]["name"], "uid": pod["metadata"]["uid"]}
        answer = self.call(
            "POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{service_account}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec},
        )
        return str(answer["status"]["token"])

    def write_kubeconfig(self, path: Path, *, token: str | None = None, ca_file: Path | None = None, server: str | None = None) -> Path:
        """A kubeconfig for this server: the admin's client certificate, or a bearer `token`."""
        if token is not None:
            user = f"    token: {token}\n"
        else:
            user = f"    client-certificate: {self.certs / 'admin.crt'}\n    client-key: {self.certs / 'admin.key'}\n"
        path.write_text(
            "apiVersion: v1\nkind: Config\n"
            f"clusters:\n- name: local\n  cluster:\n    server: {server or self.url}\n"
            f"    certificate-authority: {ca_file or self.ca_file}\n"
            f"users:\n- name: user\n  user:\n{user}"
            "contexts:\n- name: local\n  context:\n    cluster: local\n    user: user\n"
            "current-context: local\n"
        )
        return path

    def _write_kubeconfig(self) -> None:
        self.write_kubeconfig(self.kubeconfig)

    def etcd_revision(self) -> int:
        """etcd's current revision (every write of every resource bumps it)."""
        body = json.dumps({"key": base64.b64encode(b"/").decode(), "limit": 1}).encode()
        request = urllib.request.Request(f"{self.etcd_url}/v3/kv/range", data=body, method="POST")
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(json.loads(response.read())["header"]["revision"])

    def compact(self) -> int:
        """Compact etcd's history up to now, as kube-apiserver's compactor does every interval; returns the revision."""
        revision = self.etcd_revision()
        body = json.dumps({"revision": str(revision), "physical": True}).encode()
        request = urllib.request.Request(f"{self.etcd_url}/v3/kv/compaction", data=body, method="POST")
        with urllib.request.urlopen(request, timeout=30) as response:
            response.read()
        return revision

    def __enter__(self) -> LocalApiServer:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run a local Kubernetes API server (etcd + kube-apiserver) on loopback.")
    parser.add_argument(
        "command", choices=["start", "stop", "run", "status", "binaries"],
        help="start: in the background; run: in the foreground until Ctrl-C; binaries: only find or build them, print their folder",
    )
    parser.add_argument("--data-dir", type=Path, default=cache_root() / "apiserver", help="certificates, etcd data, logs, kubeconfig (default: %(default)s)")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for each process to be ready")
    args = parser.parse_args(argv)
    server = LocalApiServer(args.data_dir, start_timeout=args.timeout, detach=args.command == "start")
    try:
        if args.command == "binaries":
            print(ensure_binaries())
        elif args.command == "start":
            print(server.start())
        elif args.command == "stop":
            was = server.running()
            server.stop()
            print("stopped" if was else "not running")
        elif args.command == "status":
            if not server.running():
                print("not running")
                return 1
            print(f"running {server.url} (kubeconfig {server.kubeconfig}, data {server.data_dir})")
        else:  # run
            signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # SIGTERM -> finally -> stop()
            signal.signal(signal.SIGINT, signal.default_int_handler)
            try:
                print(server.start(), flush=True)
                while server.running():
                    time.sleep(1)
                print(f"a process exited; see {server.data_dir}/*.log", file=sys.stderr)
                return 1
            except KeyboardInterrupt:
                return 0
            finally:
                server.stop()
    except ApiServerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
