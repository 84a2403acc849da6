from pathlib import Path

from tether.agents import build_app_from_dir

app = build_app_from_dir(Path(__file__).parent)
