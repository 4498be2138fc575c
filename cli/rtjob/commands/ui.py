"""`rtjob ui`: a local, read-only web app over this machine's run ledger and a team's storage (cli/rtjob/ui/).
Starlette, uvicorn and jinja2 are imported inside the command only: the rest of the CLI never loads them."""

from __future__ import annotations

import click

from ..core.errors import BadInput
from .options import EXIT_CODES_HELP, context_option
from .printing import echo, say

LOOPBACK = ("127.0.0.1", "localhost", "::1")
TOKEN_ENV = "RTJOB_UI_TOKEN"


@click.command(epilog=EXIT_CODES_HELP)
@click.option("--storage", "storage_uri", metavar="URI",
              help="List a team's runs from this storage (s3://bucket/prefix or a folder; default: the context's "
                   "storage setting, else this machine's run ledger only).")
@click.option("--endpoint-url", help="With --storage: the S3-compatible endpoint (default: AWS_ENDPOINT_URL_S3 / "
                                     "AWS_ENDPOINT_URL).")
@context_option
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True,
              help="The port to listen on (0: any free one; the address is printed).")
@click.option("--host", default="127.0.0.1", show_default=True,
              help=f"The address to listen on. Anything but loopback requires a token: ${TOKEN_ENV}, else one "
                   "generated and printed once; browsers give it on /login (a cookie), scripts in X-Rtjob-Token.")
@click.option("--open", "open_browser", is_flag=True, help="Open the runs page in the default browser.")
def ui(storage_uri: str | None, endpoint_url: str | None, port: int, host: str, open_browser: bool) -> None:
    """Browse runs in a browser: history, live logs, metric curves, samples, comparisons. Read-only.

    \b
    Examples:
      rtjob ui                                   this machine's runs, at http://127.0.0.1:8765/
      rtjob ui --storage s3://team-bucket/runs   the team's runs too, from the bucket's index
      rtjob ui --host 0.0.0.0 --port 9000        on the network, behind a token
    """
    import os
    import secrets
    import socket

    from .. import ui as ui_package

    missing = ui_package.missing_chart_assets()
    if missing:
        raise BadInput(f"rtjob ui: this rtjob was built without its chart library ({', '.join(missing)} not in "
                       f"{ui_package.VENDOR}): in rtjob's clone run `make ui-assets` (needs npm) and install it "
                       "again (pip install .)")
    try:
        import uvicorn

        from ..ui.app import Config, create_app
    except ImportError as exc:
        raise BadInput(f"rtjob ui needs the ui extra ({exc.name} is missing): pip install 'rtjob[ui]'") from None
    from ..core.redact import REDACTOR
    from ..runs.places import storage_root
    from .settings import settings_from

    settings = settings_from(None, None, (), False)
    listed = storage_uri or settings.get("storage")
    token = None
    if host not in LOOPBACK:
        token = os.environ.get(TOKEN_ENV) or secrets.token_urlsafe(24)
        if len(token) < 16:
            raise BadInput(f"${TOKEN_ENV}: a token of at least 16 characters")
    if listed and listed.startswith("s3://"):  # storage that cannot be read is said now (exit 3), not on each page
        from ..storage.records import check_root

        check_root(listed, endpoint_url)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise BadInput(f"--host {host} --port {port}: cannot listen there ({exc.strerror or exc})") from None
    sock.listen(128)
    bound = sock.getsockname()[1]
    config = Config(storage=listed, lookup_root=storage_root(settings, storage_uri), endpoint=endpoint_url,
                    host=host, port=bound, token=token)
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{bound}/"
    say(f"serving {url} (read-only; Ctrl-C stops it)")
    if token is not None:
        if not os.environ.get(TOKEN_ENV):
            # Printed once, on purpose, before the redactor learns it; never logged by the server afterwards.
            echo(f"token (give it on {url}login, or as header X-Rtjob-Token): {token}", err=True)
        REDACTOR.add([token])
    if open_browser:
        import webbrowser

        webbrowser.open(url)
    server = uvicorn.Server(uvicorn.Config(create_app(config), log_level="warning", access_log=False,
                                           lifespan="off"))
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()


COMMANDS = [ui]
