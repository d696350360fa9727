"""What tfm's plotting scripts share: reading a report and a headless matplotlib."""
import json
import sys


def load_json(path, script):
    """The JSON object in `path`; exits naming the script and the file when it cannot be read."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        sys.exit(f"{script}: {path}: {e}")


def pyplot():
    """matplotlib.pyplot drawing to files (no display needed)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def save_figure(fig, path, script, dpi):
    """Writes `fig` to `path` as tfm writes its files: never through a symbolic link or over a FIFO,
    device or directory (refused, naming it), through a temporary created exclusively with an
    unpredictable name beside the target, renamed over it once complete."""
    import os
    import stat
    import tempfile
    try:
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode):
            sys.exit(f"{script}: {path}: exists and is not a regular file; tfm writes only regular files: "
                     "remove it or choose another path")
    except FileNotFoundError:
        pass
    folder, name = os.path.split(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=folder)  # O_CREAT | O_EXCL, random name
    try:
        with os.fdopen(fd, "wb") as f:
            fig.savefig(f, dpi=dpi, format=os.path.splitext(path)[1].lstrip(".") or "png")
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _umask():
    import os
    mask = os.umask(0)
    os.umask(mask)
    return mask
