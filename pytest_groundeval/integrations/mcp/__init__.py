"""The per-case MCP server the harness owns (issue 19).

``host.py`` (the harness's side, in the process that runs the case) serves one case's tools,
the task's ``agent_tools(inputs)`` wrapped by ``run/toolcalls.harness_tools`` exactly as the
LangGraph agent gets them, on a private Unix socket, and writes the spec file and the MCP
client config an agent is given. ``server.py`` is the stdio MCP server an agent's MCP client
starts (``python -m pytest_groundeval.integrations.mcp.server SPEC``): a bridge that lists and
calls those tools through the socket and holds no data of its own. ``wire.py`` is the line
protocol between the two (standard library only, so the server starts fast).

Nothing is imported until asked for.
"""
