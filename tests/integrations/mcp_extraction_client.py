"""A 30-line MCP client agent for the extraction suite (the README's example): the prompt on
stdin, the case's server from GROUNDEVAL_MCP_CONFIG, the answer on stdout, usage in a file."""
import asyncio, json, os, re, sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


async def main() -> None:
    prompt = sys.stdin.read()
    server = json.load(open(os.environ["GROUNDEVAL_MCP_CONFIG"]))["mcpServers"]["groundeval"]
    params = StdioServerParameters(command=server["command"], args=server["args"])
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        assert "Patient/" in prompt, "an extraction prompt names its patient"
        result = await session.call_tool("list_medication_requests", {"status": "active"})
        listed = json.loads(result.content[0].text)["medication_requests"]
    meds, seen = [], set()
    for m in listed:
        if not m.get("do_not_perform") and m["code"] not in seen:
            seen.add(m["code"])
            meds.append({"code": m["code"], "display": m["display"]})
    print(json.dumps({"active_medications": meds}))
    with open(os.environ["GROUNDEVAL_USAGE_FILE"], "w") as fh:  # a scripted agent: no model, no tokens
        json.dump({"input_tokens": len(re.findall(r"\S+", prompt)), "output_tokens": len(meds)}, fh)


asyncio.run(main())
