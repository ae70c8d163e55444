"""`tandem keys`: make an API key for a tenant, or hash one for the tenants file."""

import json
import sys
from typing import Annotated

import typer
import yaml

app = typer.Typer(help="API keys (stored hashed).", no_args_is_help=True)


@app.command("new")
def new(tenant: str) -> None:
    """Make a key for TENANT: prints the key (give it to the tenant), its hash, and the tenants file's line."""
    from gateway.tenants import hash_key, new_key, tenant_name_problem

    if problem := tenant_name_problem(tenant):  # (a review) a line break made a second tenant
        typer.echo(f"error: {problem}", err=True)
        raise typer.Exit(2)
    key = new_key()
    hashed = hash_key(key)
    # quoted where YAML would read the name as something else (`true`, `123`, `#x`, `a: b`): JSON's quoting is YAML's,
    # but for `\ud83d\ude80`, JSON's escape of a character past U+FFFF, which YAML refuses (a review): written as is
    named = tenant if _reads_as(tenant) else json.dumps(tenant, ensure_ascii=False)
    typer.echo(f"key (shown once): {key}")
    typer.echo(f"hash:             {hashed}")
    # The whole file, `tenants:` first: the tenant's line saved alone was refused (a new user's trial of the docs)
    typer.echo("tenants file:     (a new tenants.yaml is the two lines below; in one you have, the second goes under")
    typer.echo("                  its `tenants:`; a tenant listed there already: add the hash to its keys)")
    typer.echo("tenants:")
    typer.echo(f"  {named}: {{keys: ['{hashed}']}}")


def _reads_as(name: str) -> bool:
    """Whether `NAME: 0` is read by YAML as that name."""
    try:
        return yaml.safe_load(f"{name}: 0") == {name: 0}
    except yaml.YAMLError:
        return False


@app.command("hash")
def hash_key_command(
    key: Annotated[str | None, typer.Argument(help="the key; left out (or -), read from standard input")] = None,
) -> None:
    """Print the hash of an existing key, as the tenants file stores it. Pipe the key in (`tandem keys hash <
    key.txt`) to keep it out of the process list and the shell's history."""
    from gateway.tenants import hash_key, is_header_token

    if key is None or key == "-":
        if sys.stdin.isatty():  # typed: not echoed (a wait with no word looked like a hang; a review)
            key = typer.prompt("key", hide_input=True)
        else:  # its first line that is not blank; a BOM a Windows editor wrote is no part of it
            key = next((line.strip() for line in sys.stdin if line.strip()), "").removeprefix("\ufeff")
    if not is_header_token(key):
        typer.echo("error: a key is printable ASCII without blanks, not empty (a bearer header carries it)", err=True)
        raise typer.Exit(2)
    typer.echo(hash_key(key))
