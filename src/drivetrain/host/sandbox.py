"""Run commands in a bubblewrap sandbox: the filesystem read-only except the workspace, no network.

``Sandbox.wrap(argv)`` returns the ``bwrap`` command line that runs ``argv`` with:

- the whole filesystem read-only (``--ro-bind / /``), a fresh ``/dev`` and ``/proc``,
  and a private, empty ``/tmp``;
- the workspace and any ``extra_writable`` directories writable;
- a private cache folder for the session, writable (``$XDG_CACHE_HOME``, npm's cache): tools that
  keep a cache under ``$HOME`` work, and cannot poison the real one;
- protected paths inside the writable folders bound read-only on top: ``.git/hooks`` and
  ``.git/config`` of a repository (``.git`` as a whole when it is not a repository yet: absent, a
  ``gitdir:`` file, or a folder without ``HEAD``), ``.drivetrain``, and ``$DRIVETRAIN_HOME`` if it lies
  inside one. A sandboxed command must not plant a hook or a config that runs unsandboxed later,
  nor loosen drivetrain's own settings or rewrite its audit log. An absent one gets an empty
  read-only stand-in, so it cannot be created either (bubblewrap makes an empty folder or file on
  the host to mount it on; ``release()`` removes those once no sandboxed command is running);
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
import tempfile
import threading
import weakref
from collections.abc import Iterable, Sequence
from pathlib import Path

from drivetrain.errors import HarnessError
from drivetrain.home import drivetrain_home
from drivetrain.host.procs import child_env, passes

INSTALL_HINT = (
    "Install bubblewrap (Debian/Ubuntu: `sudo apt-get install bubblewrap`; Fedora: "
    "`sudo dnf install bubblewrap`; Arch: `sudo pacman -S bubblewrap`)."
)
USERNS_HINT = (
    "bubblewrap needs unprivileged user namespaces when not run as root: enable them "
    "(`sudo sysctl -w kernel.unprivileged_userns_clone=1`; on Ubuntu 23.10+, AppArmor restricts "
    "them: `sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0`, or give bwrap an "
    "AppArmor profile)."
)
REFUSAL = (
    "drivetrain refuses to run Bash unsandboxed when --sandbox is set, so the command was not run; "
    "fix the sandbox or run without --sandbox."
)
CHECK_TIMEOUT_S = 10.0
# What a sandboxed command may see of the environment (plus what settings pass through): names or globs.
SANDBOX_ENV = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "LC_*",
    "TERM",
    "COLORTERM",
    "NO_COLOR",
    "TZ",
    "VIRTUAL_ENV",
    "PYENV_ROOT",
    "PYENV_VERSION",
    "RUSTUP_HOME",
    "CARGO_HOME",
    "GOPATH",
    "GOROOT",
    "JAVA_HOME",
    "NVM_DIR",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
    "GIT_SSL_CAINFO",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
)
PROTECTED = (".git/hooks/", ".git/config", ".drivetrain/")  # in each writable folder; a trailing / marks a folder


class SandboxUnavailable(HarnessError):
    """bubblewrap is missing or cannot start a sandbox here; nothing was run."""


class Sandbox:
    def __init__(
        self,
        workspace: Path,
        *,
        extra_writable: Iterable[Path | str] = (),
        allow_network: bool = False,
        readonly_inside: Sequence[str] = PROTECTED,
    ):
        self.workspace = Path(workspace).expanduser().resolve()
        self.extra_writable = [Path(p).expanduser().resolve() for p in extra_writable]
        self.allow_network = allow_network
        self.readonly_inside = tuple(readonly_inside)
        self._bwrap: str | None = None
        self._problem: str | None = None  # None: not checked yet; "": works; else why not
        self._folder: Path | None = None  # the session's own folder: cache/ (bound inside), empty/ and empty-file
        self._lock = threading.Lock()
        self._running = 0  # wrapped commands not released yet
        self._stand_ins: set[Path] = set()  # mount points bubblewrap made for them on the host

    # -- the command line

    def writable(self) -> list[Path]:
        """The directories a sandboxed command may write to (that exist), parents before children."""
        dirs = {self.workspace, *(p for p in self.extra_writable if p.exists())}
        return sorted(dirs, key=lambda p: len(p.parts))

    def protected(self) -> list[tuple[Path, str]]:
        """The paths inside writable directories made read-only, parents first, each with how:
        "bind" (it exists: bound read-only onto itself), or "dir" / "file" (absent: an empty read-only stand-in)."""
        roots = self.writable()
        wanted = [(root / rel.rstrip("/"), rel.endswith("/")) for root in roots for rel in self._inside(root)]
        found: dict[Path, str] = {}
        for path, is_dir in [*wanted, (drivetrain_home(), True)]:
            if path.exists():
                target, how = path.resolve(), "bind"
            else:
                target = path  # the first missing part gets the stand-in: it holds the rest
                while not target.parent.exists():
                    target = target.parent
                target = target.parent.resolve() / target.name
                how = "dir" if is_dir or target != path else "file"
            if any(r == target or r in target.parents for r in roots):
                found.setdefault(target, how)
        return sorted(found.items(), key=lambda item: len(item[0].parts))

    def _inside(self, root: Path) -> tuple[str, ...]:
        git = root / ".git"
        if (git / "HEAD").is_file():  # a repository: guard what git would run or obey
            return self.readonly_inside
        # not a repository yet: creating one is how a hook or a config would get in
        return (".git/", *(rel for rel in self.readonly_inside if not rel.startswith(".git/")))

    def wrap(self, argv: Sequence[str], *, cwd: Path | None = None) -> list[str]:
        """The bwrap command line that runs ``argv`` sandboxed, starting in ``cwd`` (default: the workspace).

        Run it with ``env=self.environment()`` (bwrap passes its own environment on), and call
        ``release()`` once it has ended."""
        folder = self._session_folder()
        cmd = [
            self._bwrap or shutil.which("bwrap") or "bwrap",
            "--ro-bind",
            "/",
            "/",
            "--dev",
            "/dev",
            "--proc",
            "/proc",
            "--tmpfs",
            "/tmp",
        ]
        for path in self.writable():
            cmd += ["--bind", str(path), str(path)]
        cmd += ["--bind", str(folder / "cache"), str(folder / "cache")]
        with self._lock:
            for path, how in self.protected():
                source = {"bind": path, "dir": folder / "empty", "file": folder / "empty-file"}[how]
                cmd += ["--ro-bind", str(source), str(path)]
                if how != "bind":
                    self._stand_ins.add(path)
            self._running += 1
        if not self.allow_network:
            cmd.append("--unshare-net")
        cmd += [
            "--unshare-pid",
            "--die-with-parent",
            "--new-session",
            "--chdir",
            str(Path(cwd).resolve() if cwd is not None else self.workspace),
            "--",
            *argv,
        ]
        return cmd

    def release(self) -> None:
        """A wrapped command has ended. When none is left running, remove the empty mount points bubblewrap
        made for the stand-ins (an empty ``.git`` left behind would change where tools think a project starts)."""
        with self._lock:
            self._running = max(self._running - 1, 0)
            if self._running:
                return
            for path in sorted(self._stand_ins, key=lambda p: len(p.parts), reverse=True):
                try:
                    if path.is_dir() and not path.is_symlink():
                        path.rmdir()  # only if still empty: someone may have made it a real one since
                    elif path.is_file() and path.stat().st_size == 0:
                        path.unlink()
                except OSError:
                    pass
            self._stand_ins.clear()

    def environment(self, passthrough: Iterable[str] = ()) -> dict[str, str]:
        """The whole environment of a sandboxed command: ``SANDBOX_ENV`` and the ``passthrough`` names
        (or globs) from ours, minus the credentials not passed through, plus the private cache folder."""
        passthrough = tuple(passthrough)
        keep = (*SANDBOX_ENV, *passthrough)
        env = {k: v for k, v in child_env(passthrough).items() if passes(k, keep)}
        cache = self._session_folder() / "cache"
        env.update(XDG_CACHE_HOME=str(cache), npm_config_cache=str(cache / "npm"))
        return env

    def _session_folder(self) -> Path:
        """Made on first use, removed when this Sandbox goes (or the process exits)."""
        if self._folder is None:
            folder = Path(tempfile.mkdtemp(prefix="drivetrain-sandbox-"))
            weakref.finalize(self, shutil.rmtree, folder, ignore_errors=True)
            for sub in ("cache", "empty"):
                (folder / sub).mkdir()
            (folder / "empty-file").touch(mode=0o444)
            self._folder = folder
        return self._folder

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
        argv = self.wrap(["true"])
        try:
            done = subprocess.run(
                argv,
                env=self.environment(),
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=CHECK_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as e:
            why = str(e)
        else:
            if done.returncode == 0:
                return ""
            why = (done.stderr or done.stdout).decode(errors="replace").strip() or f"exit code {done.returncode}"
        finally:
            self.release()
        return (
            f"Cannot sandbox Bash: bubblewrap ({bwrap}) is installed but could not start a sandbox: "
            f"{why}. {USERNS_HINT} {REFUSAL}"
        )
