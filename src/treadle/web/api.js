// The server's REST API: JSON in and out, the tab's API key on every request, a 401 answered
// by asking the user for the key and trying again.
import { apiKey, askForKey } from "./auth.js";

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

export async function request(method, path, body) {
  for (let attempt = 0; ; attempt += 1) {
    const key = apiKey();
    const headers = {};
    if (key) headers.Authorization = `Bearer ${key}`;
    if (body !== undefined) headers["Content-Type"] = "application/json";
    let response;
    try {
      response = await fetch(path, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
      });
    } catch (error) {
      // The browser's own words ("Failed to fetch", "NetworkError…") name no cause.
      throw new ApiError(0, "server_unreachable", `The Treadle server at ${location.host} does not answer: is \`treadle serve\` still running? (${error.message})`);
    }

    if (response.status === 401 && attempt < 5) {
      await askForKey(key ? "The server refused that key: enter another." : "This server needs an API key.");
      continue;
    }
    if (response.status === 204) return null;
    const data = await response.json().catch(() => null);
    if (!response.ok && !data?.error && response.status >= 502 && response.status <= 504) {
      // A proxy's answer, not Treadle's (Treadle's errors are JSON).
      throw new ApiError(response.status, "server_unreachable", `The Treadle server behind ${location.host} is not reachable (HTTP ${response.status} from a proxy): is \`treadle serve\` still running?`);
    }
    if (!response.ok) {
      const error = data?.error ?? {};
      throw new ApiError(response.status, error.code, error.message ?? response.statusText);
    }
    return data;
  }
}

export const api = {
  get: (path) => request("GET", path),
  post: (path, body = {}) => request("POST", path, body),
  put: (path, body = {}) => request("PUT", path, body),
};

/** The URL path of a conversation, or of something under it. */
export function conversationPath(id, rest = "") {
  return `/api/conversations/${encodeURIComponent(id)}${rest}`;
}

/** `?a=1&b=2` from an object, leaving out empty values; arrays are comma-joined. */
export function query(params) {
  const search = new URLSearchParams();
  for (const [name, value] of Object.entries(params)) {
    if (value === undefined || value === null || value === "") continue;
    if (Array.isArray(value)) {
      if (value.length) search.set(name, value.join(","));
    } else {
      search.set(name, String(value));
    }
  }
  const text = search.toString();
  return text ? `?${text}` : "";
}
