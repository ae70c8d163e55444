"""`tandem keys`: make an API key for a tenant, or hash one for the tenants file."""

import sys
from typing import Annotated

import typer
import yaml

app = typer.Typer(help="API keys (stored hashed).", no_args_is_help=True)


@app.command("new")
def new(tenant: str) -> None:
    """Make a key for TENANT: prints the key (give it to the tenant), its hash, and the tenants file's line."""
    from gateway.tenants import TENANT_NAME_RULE, hash_key, is_tenant_name, new_key

    if not is_tenant_name(tenant):  # (a review) `#x`, `true`, a line break: a line the gateway reads otherwise
        typer.echo(f"error: {tenant!r}: {TENANT_NAME_RULE}", err=True)
        raise typer.Exit(2)
    key = new_key()
    hashed = hash_key(key)
    # quoted where YAML would read the name as something else (`true`, `123`, `null`)
    named = tenant if yaml.safe_load(f"{tenant}: 0") == {tenant: 0} else f"'{tenant}'"
    typer.echo(f"key (shown once): {key}")
    typer.echo(f"hash:             {hashed}")
    typer.echo(f"tenants file:     {named}: {{keys: ['{hashed}']}}")
    typer.echo(
        f"                  (a tenant listed there already: add the hash to its keys; {tenant} twice is refused)"
    )


@app.command("hash")
def hash_key_command(
    key: Annotated[str | None, typer.Argument(help="the key; left out (or -), read from standard input")] = None,
) -> None:
    """Print the hash of an existing key, as the tenants file stores it. Pipe the key in (`tandem keys hash <
    key.txt`) to keep it out of the process list and the shell's history."""
    from gateway.tenants import hash_key, is_header_token

    if key is None or key == "-":
        key = sys.stdin.readline().strip()
    if not is_header_token(key):
        typer.echo("error: a key is printable ASCII without blanks, not empty (a bearer header carries it)", err=True)
        raise typer.Exit(2)
    typer.echo(hash_key(key))
