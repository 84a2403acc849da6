"""The agents of the recovery fault test: their tools write, and the test is about crashes, not
approvals, so the gate is off."""

from pathlib import Path

from tether.agents import ApprovalPolicy, build_app_from_dir

app = build_app_from_dir(
    Path(__file__).parent, approval=ApprovalPolicy(require_for_destructive=False)
)
