"""Two zapverify replicas behind nginx on loopback, sharing one PostgreSQL: the compose
deployment (compose.yaml) without Docker, for scripts/system_test.

The replicas get the environment of ``deploy/verifier.env`` (the file compose passes to
its containers) and, as compose.yaml requires, an API keys file made by
``scripts/compose_secrets``; nginx runs ``deploy/nginx.conf`` with only its ``zv:``-tagged
lines rewritten for loopback (:func:`render_nginx_conf`).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tests.server import free_port

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"


def load_env_file(path: Path) -> dict[str, str]:
    """``KEY=VALUE`` lines of a compose env_file (comments and blank lines skipped)."""
    out = {}
    for n, line in enumerate(path.read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise ValueError(f"{path}:{n}: not KEY=VALUE: {line!r}")
        out[key] = value
    return out


def render_nginx_conf(text: str, *, listen_port: int, upstream_ports: list[int], scratch: Path,
                      replace: dict[str, str] | None = None) -> str:
    """``deploy/nginx.conf`` (or ``deploy/nginx-tls.conf``) for loopback: the ``zv:listen``
    line listens on 127.0.0.1:``listen_port`` (its parameters, such as ``ssl``, kept), the
    ``zv:upstream`` line becomes one server per port (same parameters, without Docker's
    ``resolve``), the ``zv:docker-dns`` line goes, a line tagged with a key of ``replace``
    becomes that directive, and the temp paths move into ``scratch`` so nginx needs no
    system directory.  Raises ValueError when a tagged line is missing or repeated."""
    lines = text.splitlines()
    out = []
    replace = replace or {}
    seen = {"listen": 0, "upstream": 0, "docker-dns": 0} | dict.fromkeys(replace, 0)
    for line in lines:
        m = re.search(r"#\s*zv:([\w-]+)\s*$", line)
        tag = m.group(1) if m else None
        if tag in seen:
            seen[tag] += 1
        indent = line[: len(line) - len(line.lstrip())]
        if tag == "listen":
            params = re.match(r"\s*listen\s+\S+((?:\s+[^;\s]+)*)\s*;", line)
            if not params:
                raise ValueError(f"zv:listen line is not a listen line: {line!r}")
            out.append(f"{indent}listen 127.0.0.1:{listen_port}{params.group(1)};")
        elif tag in replace:
            out.append(f"{indent}{replace[tag]}")
        elif tag == "upstream":
            params = re.match(r"\s*server\s+\S+\s+(.*?);", line)
            if not params:
                raise ValueError(f"zv:upstream line is not a server line: {line!r}")
            rest = " ".join(p for p in params.group(1).split() if p != "resolve")
            out += [f"{indent}server 127.0.0.1:{p} {rest};" for p in upstream_ports]
        elif tag == "docker-dns":
            continue
        else:
            out.append(line)
            if re.match(r"\s*http\s*\{", line):
                for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"):
                    out.append(f"    {kind}_temp_path {scratch / kind};")
    bad = [t for t, n in seen.items() if n != 1]
    if bad:
        raise ValueError(f"the nginx configuration must have exactly one line tagged zv:{', zv:'.join(bad)}")
    return "\n".join(out) + "\n"


def nginx_binary() -> str | None:
    """Debian installs nginx in /usr/sbin, which is not on every PATH."""
    return shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if os.access(p, os.X_OK)), None)


@dataclass
class Replica:
    """``zapverify serve`` as compose runs it, on 127.0.0.1:``port`` in its own process group."""

    name: str
    port: int
    env: dict[str, str]
    log: Path
    proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Replica:
        out = open(self.log, "ab")
        self.proc = subprocess.Popen(
            [str(ROOT / ".venv" / "bin" / "zapverify"), "serve", "--host", "127.0.0.1", "--port", str(self.port)],
            cwd=ROOT, env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        return self

    def wait_ready(self, timeout: float = 120.0) -> list[int]:
        """Poll /readyz until 200; returns the status codes seen before (connection refused
        is not a status: with ZAPVERIFY_LISTEN_WHEN_READY the list stays empty)."""
        seen = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc and self.proc.poll() is not None:
                raise RuntimeError(f"replica {self.name} exited with {self.proc.returncode}; see {self.log}")
            try:
                code = httpx.get(self.url + "/readyz", timeout=2).status_code
                if code == 200:
                    return seen
                seen.append(code)
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise TimeoutError(f"replica {self.name} not ready in {timeout} s; see {self.log}")

    def kill(self) -> None:
        """SIGKILL the whole process group (uvicorn's supervisor and its workers), as a
        container dying would."""
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()


@dataclass
class Nginx:
    conf: Path
    scratch: Path
    log: Path
    proc: subprocess.Popen | None = None

    def command(self) -> list[str]:
        directives = f"daemon off; pid {self.scratch / 'nginx.pid'}; error_log {self.scratch / 'error.log'} info;"
        if os.geteuid() == 0:
            directives += " user root;"  # workers must read the scratch dir, which is root's
        return [nginx_binary() or "nginx", "-p", str(self.scratch), "-c", str(self.conf), "-g", directives]

    def check(self) -> None:
        """``nginx -t`` on the configuration; RuntimeError with nginx's message if it fails."""
        test = subprocess.run([*self.command(), "-t"], capture_output=True, text=True)
        if test.returncode:
            raise RuntimeError(f"nginx -t failed:\n{test.stderr}")

    def start(self) -> Nginx:
        self.check()
        self.proc = subprocess.Popen(self.command(), stdout=open(self.log, "ab"), stderr=subprocess.STDOUT,
                                     start_new_session=True)
        return self

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGQUIT)  # graceful: finish requests, then exit
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)


def make_secrets(directory: Path) -> str:
    """Run ``scripts/compose_secrets --dir directory`` (what a user runs before ``docker
    compose up``) and return the admin key it prints; the keys file is ``directory/api_keys``."""
    out = subprocess.run([str(ROOT / "scripts" / "compose_secrets"), "--dir", str(directory)],
                         capture_output=True, text=True, timeout=30)
    if out.returncode:
        raise RuntimeError(f"scripts/compose_secrets failed: {out.stderr}")
    return out.stdout.strip()


def nginx_scratch(scratch: Path) -> None:
    """The temp directories :func:`render_nginx_conf` points nginx at."""
    for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"):
        (scratch / kind).mkdir(parents=True, exist_ok=True)


def make_tls_files(directory: Path) -> tuple[Path, Path, Path]:
    """A throwaway CA and a certificate it signed for 127.0.0.1 and localhost: (CA
    certificate, chain, key), PEM."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.UTC)

    def cert(subject, issuer, key, signer, *, ca: bool):
        b = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(key.public_key())
             .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
             .not_valid_after(now + datetime.timedelta(days=1))
             .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
             .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
             .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(signer.public_key()), critical=False))
        if ca:
            b = b.add_extension(x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False, data_encipherment=False,
                key_agreement=False, key_cert_sign=True, crl_sign=True, encipher_only=False, decipher_only=False),
                critical=True)
        else:
            b = b.add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                             x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                                critical=False)
            b = b.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        return b.sign(signer, hashes.SHA256())

    ca_key, leaf_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "zapverify system test CA")])
    ca = cert(ca_name, ca_name, ca_key, ca_key, ca=True)
    leaf = cert(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]), ca_name, leaf_key, ca_key, ca=False)
    pem = serialization.Encoding.PEM
    paths = directory / "ca.pem", directory / "fullchain.pem", directory / "privkey.pem"
    paths[0].write_bytes(ca.public_bytes(pem))
    paths[1].write_bytes(leaf.public_bytes(pem) + ca.public_bytes(pem))
    paths[2].write_bytes(leaf_key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    paths[2].chmod(0o600)
    return paths


@dataclass
class Cluster:
    """Replicas ``a`` and ``b``, nginx in front, all logs under ``artifacts``.  The replicas
    require ``api_key`` (scopes verify, receipts and admin) as compose.yaml's do."""

    database_url: str
    scratch: Path
    artifacts: Path
    replicas: dict[str, Replica] = field(default_factory=dict)
    nginx: Nginx | None = None
    nginx_port: int = 0
    api_key: str = ""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.nginx_port}"

    @property
    def keys_file(self) -> Path:
        return self.scratch / "secrets" / "api_keys"

    @property
    def auth(self) -> dict[str, str]:
        """The headers that carry the key."""
        return {"Authorization": f"Bearer {self.api_key}"}

    def replica_env(self, name: str) -> dict[str, str]:
        env = {**os.environ, **load_env_file(DEPLOY / "verifier.env")}
        metrics = self.scratch / f"metrics-{name}"
        env.update(ZAPVERIFY_DATABASE_URL=self.database_url, ZAPVERIFY_INSTANCE=f"replica-{name}",
                   ZAPVERIFY_DATA_DIR=str(self.scratch / f"data-{name}"), PROMETHEUS_MULTIPROC_DIR=str(metrics),
                   ZAPVERIFY_API_KEYS_FILE=str(self.keys_file))
        return env

    def start(self) -> Cluster:
        self.artifacts.mkdir(parents=True, exist_ok=True)
        self.api_key = make_secrets(self.keys_file.parent)
        for name in ("a", "b"):
            self.replicas[name] = Replica(name, free_port(), self.replica_env(name),
                                          self.artifacts / f"replica-{name}.log").start()
        for r in self.replicas.values():
            r.wait_ready()
        self.nginx_port = free_port()
        nginx_scratch(self.scratch)
        conf = self.scratch / "nginx.conf"
        conf.write_text(render_nginx_conf((DEPLOY / "nginx.conf").read_text(), listen_port=self.nginx_port,
                                          upstream_ports=[r.port for r in self.replicas.values()],
                                          scratch=self.scratch))
        self.nginx = Nginx(conf, self.scratch, self.artifacts / "nginx.log").start()
        deadline = time.monotonic() + 20
        while True:
            try:
                if httpx.get(self.url + "/healthz", timeout=2).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"nginx on {self.url} does not answer; see {self.artifacts / 'nginx.log'}")
            time.sleep(0.1)

    def stop(self) -> None:
        if self.nginx:
            self.nginx.stop()
            if (self.scratch / "error.log").exists():
                shutil.copy(self.scratch / "error.log", self.artifacts / "nginx-error.log")
        for r in self.replicas.values():
            r.stop()
