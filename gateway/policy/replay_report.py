"""Tables for `tandem policy replay`, with a bar per share so two policies compare at a glance."""

from rich.console import Console
from rich.table import Table

BAR_WIDTH = 30


def _bar(share: float) -> str:
    return "█" * round(share * BAR_WIDTH)


def print_report(out: dict, names: dict[str, str | None]) -> None:
    console = Console()
    for key in ("policy", "against"):
        if key not in out:
            continue
        report = out[key]
        console.print(f"\n[bold]{names[key]}[/bold]: {report['requests']} requests, "
                      f"{report['privacy_blocked']} private requests had cloud pools removed")  # fmt: skip
        for tag, n in report["unknown_privacy_tags"].items():
            console.print(f"[red]{n} requests carry tag {tag!r}, which this policy does not know: refused (400)[/red]")
        for title, shares in (("rule", report["rule_share"]), ("pool", report["pool_share"])):
            table = Table(title=f"share by {title}", title_justify="left")
            table.add_column(title)
            table.add_column("share", justify="right")
            table.add_column("")
            for name, share in shares.items():
                table.add_row(name, f"{share:.1%}", _bar(share))
            console.print(table)
    if "differences" in out:
        diff = out["differences"]
        console.print(f"\n[bold]differences[/bold]: {diff['requests_changing_pool']} requests change pool, "
                      f"{diff['requests_changing_rule']} change rule")  # fmt: skip
        table = Table(title_justify="left")
        for column in ("from pool", "to pool", "requests"):
            table.add_column(column)
        for move in diff["pool_moves"]:
            table.add_row(move["from"], move["to"], str(move["requests"]))
        console.print(table)
