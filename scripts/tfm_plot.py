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
