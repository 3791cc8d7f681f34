"""Run commands in a bubblewrap sandbox: the filesystem read-only except the workspace, no network.

``Sandbox.wrap(argv)`` returns the ``bwrap`` command line that runs ``argv`` with:

- the whole filesystem read-only (``--ro-bind / /``), a fresh ``/dev`` and ``/proc``,
  and a private, empty ``/tmp``;
- the workspace and any ``extra_writable`` directories writable;
- ``.git/hooks``, ``.git/config`` and ``.drivetrain`` inside them (and ``$DRIVETRAIN_HOME`` if it lies inside
  one) bound read-only on top, when they exist: a sandboxed command must not plant a hook
  that runs unsandboxed later, nor loosen drivetrain's own settings or rewrite its audit log;
- no network (a new, empty network namespace) unless ``allow_network``;
- its own PID namespace: it cannot see or signal other processes, and everything it started
  dies when the command ends (or when drivetrain dies: ``--die-with-parent``);
- a new terminal session, so it cannot push keystrokes into a terminal.

The command starts from an empty environment plus ``SANDBOX_ENV`` and the names passed through
(``Sandbox.environment``): the bwrap process is started with exactly that environment rather than
``--clearenv --setenv NAME VALUE``, because a command line is readable by every user of the machine.

``Sandbox.check()`` tries ``bwrap … true`` once and raises ``SandboxUnavailable`` when that
fails. There is no fallback: a command that cannot be sandboxed is not run.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Iterable, Sequence

from drivetrain.errors import HarnessError
from drivetrain.home import drivetrain_home
from drivetrain.procs import child_env, passes

INSTALL_HINT = ("Install bubblewrap (Debian/Ubuntu: `sudo apt-get install bubblewrap`; Fedora: "
                "`sudo dnf install bubblewrap`; Arch: `sudo pacman -S bubblewrap`).")
USERNS_HINT = ("bubblewrap needs unprivileged user namespaces when not run as root: enable them "
               "(`sudo sysctl -w kernel.unprivileged_userns_clone=1`; on Ubuntu 23.10+, AppArmor restricts "
               "them: `sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0`, or give bwrap an "
               "AppArmor profile).")
REFUSAL = ("drivetrain refuses to run Bash unsandboxed when --sandbox is set, so the command was not run; "
           "fix the sandbox or run without --sandbox.")
CHECK_TIMEOUT_S = 10.0
# What a sandboxed command may see of the environment (plus what settings pass through): names or globs.
SANDBOX_ENV = ("PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "LC_*", "TERM", "COLORTERM",
               "NO_COLOR", "TZ", "VIRTUAL_ENV", "PYENV_ROOT", "PYENV_VERSION", "RUSTUP_HOME", "CARGO_HOME",
               "GOPATH", "GOROOT", "JAVA_HOME", "NVM_DIR", "SSL_CERT_FILE", "SSL_CERT_DIR",
               "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "GIT_SSL_CAINFO",
               "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy")


class SandboxUnavailable(HarnessError):
    """bubblewrap is missing or cannot start a sandbox here; nothing was run."""


class Sandbox:
    def __init__(self, workspace: Path, *, extra_writable: Iterable[Path] = (), allow_network: bool = False,
                 readonly_inside: Sequence[str] = (".git/hooks", ".git/config", ".drivetrain")):
        self.workspace = Path(workspace).expanduser().resolve()
        self.extra_writable = [Path(p).expanduser().resolve() for p in extra_writable]
        self.allow_network = allow_network
        self.readonly_inside = tuple(readonly_inside)
        self._bwrap: str | None = None
        self._problem: str | None = None  # None: not checked yet; "": works; else why not

    # -- the command line

    def writable(self) -> list[Path]:
        """The directories a sandboxed command may write to (that exist), parents before children."""
        dirs = {self.workspace, *(p for p in self.extra_writable if p.exists())}
        return sorted(dirs, key=lambda p: len(p.parts))

    def protected(self) -> list[Path]:
        """The existing paths inside writable directories that are bound read-only on top."""
        roots = self.writable()
        candidates = [root / rel for root in roots for rel in self.readonly_inside] + [drivetrain_home()]
        found: list[Path] = []
        for path in candidates:
            if not path.exists():
                continue
            real = path.resolve()
            if any(r in real.parents for r in roots) and real not in found:
                found.append(real)
        return sorted(found, key=lambda p: len(p.parts))

    def wrap(self, argv: Sequence[str], *, cwd: Path | None = None) -> list[str]:
        """The bwrap command line that runs ``argv`` sandboxed, starting in ``cwd`` (default: the workspace).

        Run it with ``env=self.environment()``: bwrap passes its own environment on."""
        cmd = [self._bwrap or shutil.which("bwrap") or "bwrap",
               "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
        for path in self.writable():
            cmd += ["--bind", str(path), str(path)]
        for path in self.protected():
            cmd += ["--ro-bind", str(path), str(path)]
        if not self.allow_network:
            cmd.append("--unshare-net")
        cmd += ["--unshare-pid", "--die-with-parent", "--new-session",
                "--chdir", str(Path(cwd).resolve() if cwd is not None else self.workspace), "--", *argv]
        return cmd

    def environment(self, passthrough: Iterable[str] = ()) -> dict[str, str]:
        """The whole environment of a sandboxed command: ``SANDBOX_ENV`` and the ``passthrough`` names
        (or globs) from ours, minus the credentials not passed through."""
        passthrough = tuple(passthrough)
        keep = (*SANDBOX_ENV, *passthrough)
        return {k: v for k, v in child_env(passthrough).items() if passes(k, keep)}

    # -- can it run here?

    def check(self) -> None:
        """Raise ``SandboxUnavailable`` unless a sandbox starts here. Tried once, then remembered."""
        if self._problem is None:
            self._problem = self._probe()
        if self._problem:
            raise SandboxUnavailable(self._problem)

    def _probe(self) -> str:
        bwrap = shutil.which("bwrap")
        if bwrap is None:
            return f"Cannot sandbox Bash: bubblewrap (bwrap) is not installed or not on PATH. {INSTALL_HINT} {REFUSAL}"
        self._bwrap = bwrap
        try:
            done = subprocess.run(self.wrap(["true"]), env=self.environment(), stdin=subprocess.DEVNULL,
                                  capture_output=True, timeout=CHECK_TIMEOUT_S, check=False)
        except (OSError, subprocess.TimeoutExpired) as e:
            why = str(e)
        else:
            if done.returncode == 0:
                return ""
            why = (done.stderr or done.stdout).decode(errors="replace").strip() or f"exit code {done.returncode}"
        return (f"Cannot sandbox Bash: bubblewrap ({bwrap}) is installed but could not start a sandbox: "
                f"{why}. {USERNS_HINT} {REFUSAL}")
