from pathlib import Path

from shared.agents import build_app_from_dir

app = build_app_from_dir(Path(__file__).parent)
