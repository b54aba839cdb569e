"""Validate JSON responses against nemo-gym 0.7.0's own AnySweVerifyResponse (run in its environment).

Usage: python validate.py FILE.json...   Prints one line per file: what the model parsed (its reward,
mask and failure fields, the output item classes) and ``missing``, the fields Gym's model declares that
the response does not send (a drop-in sends them all); exits 1 with pydantic's error for the first file
that does not validate.
"""

import json
import sys
import warnings

warnings.simplefilter("ignore")

from pydantic import ValidationError  # noqa: E402
from responses_api_agents.anyswe_agent.app import AnySweVerifyResponse  # noqa: E402


def main() -> int:
    for path in sys.argv[1:]:
        with open(path) as fh:
            data = json.load(fh)
        try:
            parsed = AnySweVerifyResponse.model_validate(data)
        except ValidationError as exc:
            print(f"{path}: {exc}", file=sys.stderr)
            return 1
        kinds = [type(item).__name__ for item in parsed.response.output]
        fields = ("reward", "mask_sample", "resolved", "error_kind", "failure_kind", "failure_reason")
        # A field Gym never serializes itself (exclude=True: the request's _ng_rollout_id) is not expected.
        declared = {n for n, f in AnySweVerifyResponse.model_fields.items() if not f.exclude}
        missing = sorted(declared - set(data))
        print(
            json.dumps({"file": path, **{f: getattr(parsed, f) for f in fields}, "output": kinds, "missing": missing})
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
