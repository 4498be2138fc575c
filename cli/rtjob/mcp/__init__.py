"""`rtjob mcp`: an MCP server over stdio for coding agents, on the official `mcp` SDK (the `mcp` extra).

Its tools are rtjob's commands: each answer is the JSON document the command prints with ``-o json``, got by
running that command in this process (so the document is the command's own, through the one redactor), and each
error is the command's one line. Read-only tools always; `submit` with ``--allow-submit``, `stop` (with a
confirmation token) with ``--allow-stop``. Only commands/mcp.py imports this package, inside the command
(import-linter: mcp-only-from-its-command), so no other command loads the SDK."""
