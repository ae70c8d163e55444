"""Write policies/schema.json from the pydantic models: `python -m gateway.policy.json_schema`.

Editors use it to check policy YAML as it is typed (e.g. a `# yaml-language-server:
$schema=…` line). `--check` exits 1 when the file is stale.
"""

import json
import sys
from pathlib import Path

from gateway.policy.schema import Policy

SCHEMA_PATH = Path(__file__).resolve().parents[2] / "policies" / "schema.json"


def render() -> str:
    schema = Policy.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "Tandem routing policy"
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


def main() -> None:
    if "--check" in sys.argv:
        if not SCHEMA_PATH.is_file() or SCHEMA_PATH.read_text() != render():
            print(f"{SCHEMA_PATH} is stale: run `make schema`", file=sys.stderr)
            raise SystemExit(1)
        print(f"{SCHEMA_PATH.name} is up to date")
        return
    SCHEMA_PATH.write_text(render())
    print(f"wrote {SCHEMA_PATH}")


if __name__ == "__main__":
    main()
