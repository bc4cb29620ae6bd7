"""The HTTP side of the typed client: one ``httpx.Client`` with the key, and server errors
turned into ``RemoteError`` carrying the status, the code and the server's message."""

from __future__ import annotations

from typing import Any

import httpx

from treadle.errors import TreadleError


class RemoteError(TreadleError):
    def __init__(self, status: int, code: str, message: str) -> None:
        self.status = status
        self.code = code
        self.message = message
        super().__init__(f"{status} {code}: {message}")


class HttpApi:
    def __init__(self, base_url: str, api_key: str | None = None, timeout: float = 30.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout)

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self._client.request(method, path, **kwargs)
        if response.status_code >= 400:
            try:
                error = response.json()["error"]
                raise RemoteError(response.status_code, error["code"], error["message"])
            except (ValueError, KeyError, TypeError):
                raise RemoteError(response.status_code, "http_error", response.text[:300]) from None
        if response.status_code == 204 or not response.content:
            return None
        return response.json()

    def ws_url(self, path: str) -> str:
        scheme = "wss" if self.base_url.startswith("https") else "ws"
        return scheme + self.base_url[self.base_url.index(":") :] + path

    def close(self) -> None:
        self._client.close()
