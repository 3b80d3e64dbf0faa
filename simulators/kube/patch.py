"""JSON merge patch (RFC 7386) and JSON patch (RFC 6902) as the API server applies them."""

from __future__ import annotations

from typing import Any

import jsonpatch
import jsonpointer

from simulators.kube.watch import clone


class PatchError(ValueError):
    """A patch that cannot be applied: `code` is 400 (malformed) or 422 (does not apply)."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def merge_patch(target: Any, patch: Any) -> Any:
    """Apply an RFC 7386 merge patch; `null` removes a key, lists are replaced whole."""
    if not isinstance(patch, dict):
        return clone(patch)
    result = clone(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def json_patch(target: Any, patch: Any) -> Any:
    """Apply an RFC 6902 JSON patch to a copy of `target`."""
    if not isinstance(patch, list):
        raise PatchError("json: cannot unmarshal object into Go value of type jsonpatch.Patch", 400)
    try:
        return jsonpatch.JsonPatch(patch).apply(clone(target))
    except jsonpatch.InvalidJsonPatch as exc:
        raise PatchError(f"invalid JSON patch: {exc}", 400) from exc
    except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException) as exc:
        raise PatchError(
            f"the server rejected our request due to an error in our request: {exc}", 422
        ) from exc
