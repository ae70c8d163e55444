"""The `tandem` command: every process and tool behind one CLI, one module per command group."""

import typer

from tandem.cli import edge, keys, model, policy, serve

app = typer.Typer(help="Tandem: hybrid cloud-edge LLM serving.", no_args_is_help=True, add_completion=False)
app.command()(serve.up)
app.command()(serve.gateway)
app.command("cloud-worker")(serve.cloud_worker)
app.command("sim-worker")(serve.sim_worker)
app.command("edge-agent")(serve.edge_agent)
app.add_typer(model.app, name="model")
app.add_typer(edge.app, name="edge")
app.add_typer(policy.app, name="policy")
app.add_typer(keys.app, name="keys")
