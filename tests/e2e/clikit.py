"""What the CLI-agent tests share: their spec (Claude Code, OpenClaw, Hermes, Codex, OpenCode, Pi,
Gemini CLI and Cline with the scripted model on the SWE-bench-shaped demo tasks, on docker and
apptainer) and an experiment made from it."""

from __future__ import annotations

from pathlib import Path

from anyswe.experiment import Experiment

SPEC = """\
name: cli-agents
dataset: {name: demo-swebench, instance_ids: [demo__calc-1, demo__inventory-4]}
agents:
  claude: {type: claude-code, max_turns: 10}
  openclaw: {type: openclaw, max_turns: 10}
  hermes: {type: hermes, max_turns: 10}
  codex: {type: codex, max_turns: 10}
  opencode: {type: opencode, max_turns: 10}
  pi: {type: pi, max_turns: 10}
  gemini: {type: gemini-cli, max_turns: 10}
  cline: {type: cline, max_turns: 10}
models:
  scripted: {api: scripted, protocol: anthropic-messages}
  scripted-chat: {api: scripted, protocol: openai-chat}
  scripted-responses: {api: scripted, protocol: openai-responses}
providers:
  docker: {type: docker, concurrency: 3}
  apptainer: {type: apptainer, concurrency: 3, overlay_size_mb: 512}
matrix:
  agents: [claude]
  models: [scripted]
  include:
    - {agent: openclaw, model: scripted-chat, provider: docker}
    - {agent: openclaw, model: scripted-chat, provider: apptainer}
    - {agent: openclaw, model: scripted, provider: docker}
    - {agent: hermes, model: scripted-chat, provider: docker}
    - {agent: hermes, model: scripted-chat, provider: apptainer}
    - {agent: codex, model: scripted-responses, provider: docker}
    - {agent: codex, model: scripted-responses, provider: apptainer}
    - {agent: opencode, model: scripted-chat, provider: docker}
    - {agent: opencode, model: scripted-chat, provider: apptainer}
    - {agent: pi, model: scripted, provider: docker}
    - {agent: pi, model: scripted-chat, provider: apptainer}
    - {agent: gemini, model: scripted-chat, provider: docker}
    - {agent: gemini, model: scripted, provider: apptainer}
    - {agent: cline, model: scripted-chat, provider: docker}
    - {agent: cline, model: scripted-chat, provider: apptainer}
concurrency: 6
# 600: OpenClaw alone takes 23 CPU-seconds to its first call (test_cli_agent_edges), and six of it
# ran past 240 s each when a cold CI run loaded the two cores.
timeouts: {agent: 600, grading: 300}
"""


def experiment(tmp_path: Path, *overrides: str, spec: str = SPEC) -> Experiment:
    path = tmp_path / "spec.yaml"
    path.write_text(spec)
    return Experiment.load(path, overrides=list(overrides), run_dir=tmp_path / "run")
