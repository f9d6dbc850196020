"""The kit's `mcp-py-client` driven over the SSE transport instead of streamable HTTP.

Usage: python py_sse_client.py PY_CLIENT [options] http legacy URL [OP ...]

PY_CLIENT is the kit's `py_client.py`. Its argument parsing, operations and output are used
unchanged; only the transport differs: the Python SDK's own `mcp.client.sse.sse_client`, which
opens `GET URL` and posts each request to the endpoint the stream announces. The bearer token of
`--token` is sent on both.
"""

from __future__ import annotations

import asyncio
import importlib.util
import sys

from mcp.client.sse import sse_client


def main() -> int:
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    spec = importlib.util.spec_from_file_location("py_client", sys.argv[1])
    if spec is None or spec.loader is None:
        print(f"cannot load {sys.argv[1]}", file=sys.stderr)
        return 2
    driver = importlib.util.module_from_spec(spec)
    # pydantic resolves the driver's generic models through sys.modules, so it must be there.
    sys.modules["py_client"] = driver
    spec.loader.exec_module(driver)

    def sse_transport(url, http_client):
        # The driver built its HTTP client with the bearer; the SSE transport opens its own
        # connections, so it gets the same Authorization header.
        headers = {k: v for k, v in http_client.headers.items() if k.lower() == "authorization"}
        return sse_client(url, headers=headers or None)

    driver.streamable_http_client = sse_transport
    return asyncio.run(driver.main(sys.argv[2:]))


if __name__ == "__main__":
    sys.exit(main())
