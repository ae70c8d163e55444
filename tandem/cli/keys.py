"""`tandem keys`: make an API key for a tenant, or hash one for the tenants file."""

import typer

app = typer.Typer(help="API keys (stored hashed).", no_args_is_help=True)


@app.command("new")
def new(tenant: str) -> None:
    """Make a key for TENANT: prints the key (give it to the tenant) and the line for the tenants file."""
    from gateway.tenants import hash_key, new_key

    key = new_key()
    typer.echo(f"key (shown once): {key}")
    typer.echo(f"tenants file:     {tenant}: {{keys: ['{hash_key(key)}']}}")


@app.command("hash")
def hash_key_command(key: str) -> None:
    """Print the hash of an existing key, as the tenants file stores it."""
    from gateway.tenants import hash_key

    typer.echo(hash_key(key))
