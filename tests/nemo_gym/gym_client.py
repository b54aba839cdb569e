"""Post run requests to an agent server through nemo-gym 0.7.0's own ServerClient (run in its environment).

Usage: python gym_client.py HOST PORT REQUEST.json... Each request file is posted to ``/run`` of the
server named ``anyswe_agent`` in a global config that places it at HOST:PORT, exactly as Gym's rollout
collection posts it (``nemo_gym/rollout_collection.py``: ``server_client.post(server_name=...,
url_path="/run", json=request_body)``: no Authorization header); each response is written beside its
request as ``<name>.response.json``, and one line per request printed: its file and the HTTP status.
"""

import asyncio
import json
import sys
from pathlib import Path

HOST, PORT, *REQUESTS = sys.argv[1:]
sys.argv = sys.argv[:1]  # importing nemo_gym.server_utils reads sys.argv as Hydra overrides

from nemo_gym.config_types import BaseServerConfig  # noqa: E402
from nemo_gym.server_utils import ServerClient  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

SERVER = "anyswe_agent"


async def main() -> int:
    config = OmegaConf.create(
        {SERVER: {"responses_api_agents": {"anyswe_agent": {"host": HOST, "port": int(PORT), "entrypoint": "app.py"}}}}
    )
    client = ServerClient(head_server_config=BaseServerConfig(host=HOST, port=int(PORT)), global_config_dict=config)

    async def one(path: str) -> tuple[str, int]:
        body = json.loads(Path(path).read_text())
        response = await client.post(server_name=SERVER, url_path="/run", json=body)
        data = await response.read()
        Path(path).with_suffix(".response.json").write_bytes(data)
        return path, response.status

    for path, status in await asyncio.gather(*(one(p) for p in REQUESTS)):
        print(json.dumps({"file": path, "status": status}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
