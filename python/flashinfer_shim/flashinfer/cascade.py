"""flashinfer.cascade over fi_runtime: the merge functions; the shared-prefix and
multi-level wrappers are stubs (see _missing)."""

from fi_runtime.flashinfer import merge_state, merge_state_in_place, merge_states

from . import _missing

__all__ = ["merge_state", "merge_state_in_place", "merge_states"] + _missing.names("cascade")
_missing.install(__name__)
