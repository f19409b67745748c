"""minimakv's CUDA decode path for PyTorch CUDA tensors, through the C ABI (include/minimakv/c_api.h) and ctypes.

No build step and no torch extension: build the shared library (cmake -DMINIMAKV_CUDA=ON, target
minimakv_cuda_capi) and point this module at it, either with load_library(path) or the environment variable
MINIMAKV_CUDA_CAPI. Every call runs on torch's current CUDA stream of the tensors' device. Shapes, dtypes, devices
and contiguity are checked here (ValueError); the library checks the rest and its message comes back as
MinimakvError (a RuntimeError; InvalidArgument / Unsupported ones are also ValueErrors). docs/python.md shows a
whole step; tests/python/torch_decode_check.py runs one against torch attention.

    fp8 = PagePool(FORMAT_FP8, num_pages=1024, kv_heads=8, head_dim=128)
    append(fp8, k, v, slot_mapping)                  # k, v [tokens][kv_heads][head_dim] bf16 or fp32
    tq3 = PagePool(FORMAT_TQ3, num_pages=1024, kv_heads=8, head_dim=128)
    stale = pages_to_convert(old_tokens, new_tokens)   # the retention policy: which of a sequence's pages go
    convert_to_tq3(fp8, tq3, [(src, dst, tokens), ...])
    views = [PagedView(fp8, fp8_pages_per_seq, fp8_tokens_per_seq), PagedView(tq3, tq3_pages_per_seq, ...)]
    plan = DecodePlan(views, num_q_heads=32)          # host planning + workspace + upload
    out, lse_log2 = plan.run(q)                       # q [num_seqs][num_q_heads][head_dim] fp32
"""
import ctypes
import operator
import os

import torch

FORMAT_BF16, FORMAT_FP8, FORMAT_TQ3 = 0, 1, 2
FORMAT_NAMES = {FORMAT_BF16: "bf16", FORMAT_FP8: "fp8", FORMAT_TQ3: "tq3"}
API_VERSION = 3  # MINIMAKV_C_API_VERSION this module was written against
_STATUS_NAMES = {1: "InvalidArgument", 2: "ResourceExhausted", 3: "NotFound", 4: "Corruption", 5: "Unsupported",
                 6: "Internal"}
_INPUT_DTYPES = {torch.float32: 0, torch.bfloat16: 1}  # MINIMAKV_DTYPE_*


class MinimakvError(RuntimeError):
    """A non-OK status from the library; .code is the StatusCode value, the message is the library's."""

    def __init__(self, code, function, message):
        super().__init__(f"{function}: {_STATUS_NAMES.get(code, code)}: {message}")
        self.code = code


class MinimakvInvalidArgument(MinimakvError, ValueError):
    """InvalidArgument or Unsupported: the caller's input (also catchable as ValueError)."""


# ---- the library -------------------------------------------------------------------------------------------------

_I32, _I64, _U64, _F32, _PTR = ctypes.c_int32, ctypes.c_int64, ctypes.c_uint64, ctypes.c_float, ctypes.c_void_p
_PTR_ARRAY = ctypes.POINTER(ctypes.c_void_p)  # const T* const* arrays of per-view pointers
_SIGNATURES = {
    "minimakv_api_version": [_PTR],
    "minimakv_default_rotation_seed": [_PTR],
    "minimakv_page_bytes": [_I32, _I32, _I32, _I32, _PTR],
    "minimakv_pages_to_convert": [_I32, _I32, _I32, _I64, _I64, _PTR, _I32, _PTR, _I64, _PTR],
    "minimakv_cuda_append": [_I32, _I32, _I32, _I32, _PTR, _PTR, _I32, _I32, _PTR, _PTR, _I64, _PTR, _PTR],
    "minimakv_cuda_read_error_flag": [_PTR, _PTR],
    "minimakv_cuda_convert_fp8_to_tq3": [_I32, _I32, _I32, _PTR, _PTR, _I64, _I64, _PTR, _I32, _U64, _PTR, _PTR],
    "minimakv_cuda_plan_create": [_I32, _I32, _I32, _I32, _I32, _F32, _U64, _I32, _PTR, _PTR, _PTR_ARRAY, _PTR_ARRAY,
                                  _PTR],
    "minimakv_cuda_plan_workspace_bytes": [_PTR, _PTR],
    "minimakv_cuda_plan_total_items": [_PTR, _PTR],
    "minimakv_cuda_plan_upload": [_PTR, _PTR, _PTR],
    "minimakv_cuda_decode_run": [_PTR, _I32, _PTR_ARRAY, _PTR_ARRAY, _PTR_ARRAY, _PTR_ARRAY, _PTR, _PTR, _PTR, _PTR,
                                 _PTR],
    "minimakv_cuda_plan_destroy": [_PTR],
    "minimakv_reference_decode_host": [_I32, _I32, _I32, _I32, _I32, _F32, _U64, _I32, _PTR, _PTR, _PTR, _PTR_ARRAY,
                                       _PTR_ARRAY, _PTR_ARRAY, _PTR_ARRAY, _PTR, _PTR, _PTR],
}
_lib = None


def load_library(path=None):
    """Loads libminimakv_cuda_capi.so from path, else $MINIMAKV_CUDA_CAPI; later calls reuse it."""
    global _lib
    if _lib is not None and path is None:
        return _lib
    path = path or os.environ.get("MINIMAKV_CUDA_CAPI")
    if not path:
        raise RuntimeError("minimakv_torch: no library: call load_library(path) or set MINIMAKV_CUDA_CAPI to "
                           "libminimakv_cuda_capi.so (cmake -DMINIMAKV_CUDA=ON, target minimakv_cuda_capi)")
    if not os.path.isfile(path):
        raise RuntimeError(f"minimakv_torch: library {path!r} does not exist")
    lib = ctypes.CDLL(os.path.abspath(path))
    lib.minimakv_last_error.restype = ctypes.c_char_p
    lib.minimakv_last_error.argtypes = []
    for name, argtypes in _SIGNATURES.items():
        fn = getattr(lib, name)
        fn.argtypes = argtypes
        fn.restype = ctypes.c_int
    _lib = lib
    version = _I32()
    _call("minimakv_api_version", ctypes.byref(version))
    if version.value != API_VERSION:
        _lib = None
        raise RuntimeError(f"minimakv_torch: {path} has C API version {version.value}, this module needs {API_VERSION}")
    return lib


def _call(name, *args):
    """Calls a C function of the library; a non-zero status raises with the library's message."""
    lib = load_library()
    code = getattr(lib, name)(*args)
    if code != 0:
        message = lib.minimakv_last_error().decode("utf-8", "replace")
        error = MinimakvInvalidArgument if code in (1, 5) else MinimakvError
        raise error(code, name, message)


def _call_on(device, name, *args):
    """_call with device current: the library launches on the current device, the stream must belong to it."""
    with torch.cuda.device(device):
        _call(name, *args)


def _ptr_array(pointers):
    """A C array of void* (the per-view pointer arrays)."""
    return (ctypes.c_void_p * max(1, len(pointers)))(*pointers)


def _stream(device):
    return ctypes.c_void_p(torch.cuda.current_stream(device).cuda_stream)


def _check_cuda(name, tensor, dtype, device, shape=None):
    """ValueError unless tensor is a contiguous CUDA tensor of dtype on device (and of shape, -1 = any)."""
    if not isinstance(tensor, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, not {type(tensor).__name__}")
    if tensor.device.type != "cuda":
        raise ValueError(f"{name} must be a CUDA tensor, not on {tensor.device}")
    if device is not None and tensor.device != device:
        raise ValueError(f"{name} is on {tensor.device}, the cache on {device}")
    allowed = dtype if isinstance(dtype, tuple) else (dtype,)
    if tensor.dtype not in allowed:
        raise ValueError(f"{name} has dtype {tensor.dtype}, expected {' or '.join(str(d) for d in allowed)}")
    if shape is not None and (tensor.dim() != len(shape) or
                              any(want != -1 and got != want for got, want in zip(tensor.shape, shape))):
        raise ValueError(f"{name} has shape {tuple(tensor.shape)}, expected {tuple(shape)} (-1: any)")
    if not tensor.is_contiguous():
        raise ValueError(f"{name} must be contiguous")


# ---- layout and seeds --------------------------------------------------------------------------------------------

def page_bytes(fmt, kv_heads, head_dim, page_tokens):
    """Bytes of one page of format fmt (FORMAT_*), as the library lays it out (page_layout.h)."""
    out = _I64()
    _call("minimakv_page_bytes", fmt, kv_heads, head_dim, page_tokens, ctypes.byref(out))
    return out.value


def default_rotation_seed():
    """The Hadamard seed the library uses unless told otherwise (TQ3 conversion and decode must agree)."""
    out = _U64()
    _call("minimakv_default_rotation_seed", ctypes.byref(out))
    return out.value


def pages_to_convert(old_tokens, new_tokens, anchor_tokens=256, recent_tokens=1024, page_tokens=64, pins=()):
    """Indices (in the sequence, increasing) of the pages the retention policy converts FP8 -> TQ3 when one layer of
    a sequence grows from old_tokens to new_tokens tokens: full pages that left the recent window with this growth
    and hold none of the first anchor_tokens tokens nor a token of a pinned (begin, end) range (retention_policy.h
    PagesToConvert, what the library's host cache converts). old_tokens=0: every stale page of the sequence."""
    for name, value in (("old_tokens", old_tokens), ("new_tokens", new_tokens), ("page_tokens", page_tokens)):
        if not isinstance(value, int):
            raise ValueError(f"{name} must be an int, not {type(value).__name__}")
    pins = [(int(begin), int(end)) for begin, end in pins]
    flat = (_I64 * max(1, 2 * len(pins)))(*[x for pin in pins for x in pin])
    # Enough for any valid call; the library refuses lists of more than 2^26 pages, so cap the buffer there.
    capacity = min(max(0, (new_tokens - old_tokens) // max(1, page_tokens)) + 1, (1 << 26) + 1)
    out = (_I64 * capacity)()
    count = _I64()
    _call("minimakv_pages_to_convert", anchor_tokens, recent_tokens, page_tokens, old_tokens, new_tokens, flat,
          len(pins), out, capacity, ctypes.byref(count))
    return list(out[:count.value])


class PagePool:
    """A device pool of num_pages pages of one format: .data is uint8 [num_pages][page_bytes]; page p at row p."""

    def __init__(self, fmt, num_pages, kv_heads, head_dim, page_tokens=64, device="cuda"):
        self.format = fmt
        self.kv_heads, self.head_dim, self.page_tokens = kv_heads, head_dim, page_tokens
        self.page_bytes = page_bytes(fmt, kv_heads, head_dim, page_tokens)  # validates the layout
        if num_pages <= 0:
            raise ValueError(f"num_pages {num_pages} must be positive")
        self.num_pages = num_pages
        self.data = torch.zeros(num_pages, self.page_bytes, dtype=torch.uint8, device=device)
        self.device = self.data.device
        self.error_flag = torch.zeros(1, dtype=torch.int32, device=self.device)  # append / convert row errors

    def check_errors(self):
        """Synchronizes the stream and raises if the last append or convert on this pool rejected a row."""
        _call_on(self.device, "minimakv_cuda_read_error_flag", _PTR(self.error_flag.data_ptr()),
                 _stream(self.device))


# ---- cache operations --------------------------------------------------------------------------------------------

def append(pool, k, v, slot_mapping, check=True):
    """Writes K/V rows into an FP8 (or BF16) pool: k, v [tokens][kv_heads][head_dim] bf16 or fp32 CUDA tensors,
    slot_mapping int64 [tokens] (slot = page * page_tokens + token in page; -1 = padding row, skipped).
    check=True synchronizes and raises if a row was rejected (slot outside the pool, non-finite value)."""
    if pool.format not in (FORMAT_FP8, FORMAT_BF16):
        raise ValueError(f"append writes fp8 or bf16 pages, the pool is {FORMAT_NAMES[pool.format]}")
    shape = (-1, pool.kv_heads, pool.head_dim)
    _check_cuda("k", k, tuple(_INPUT_DTYPES), pool.device, shape)
    _check_cuda("v", v, k.dtype, pool.device, tuple(k.shape))
    _check_cuda("slot_mapping", slot_mapping, torch.int64, pool.device, (k.shape[0],))
    if k.shape[0] >= 2**31:
        raise ValueError(f"{k.shape[0]} tokens in one append: at most 2^31 - 1")
    _call_on(pool.device, "minimakv_cuda_append", pool.format, pool.kv_heads, pool.head_dim, pool.page_tokens,
             _PTR(k.data_ptr()), _PTR(v.data_ptr()), _INPUT_DTYPES[k.dtype], k.shape[0],
             _PTR(slot_mapping.data_ptr()), _PTR(pool.data.data_ptr()), pool.num_pages,
             _PTR(pool.error_flag.data_ptr()), _stream(pool.device))
    if check:
        pool.check_errors()


append_fp8 = append


def convert_to_tq3(fp8_pool, tq3_pool, pairs, rotation_seed=None, check=True):
    """Converts FP8 pages to TQ3 pages. pairs: (fp8 page, tq3 page, valid tokens) triples, as a list or an int32
    tensor [n][3]; a list or a CPU tensor is range-checked here, a CUDA tensor on the device (a bad pair is not
    converted, and check=True raises the error naming it).
    The source pages are not freed: the caller's block table decides when they are reused."""
    if fp8_pool.format != FORMAT_FP8 or tq3_pool.format != FORMAT_TQ3:
        raise ValueError("convert_to_tq3 needs an fp8 pool and a tq3 pool")
    if (fp8_pool.kv_heads, fp8_pool.head_dim, fp8_pool.page_tokens) != \
            (tq3_pool.kv_heads, tq3_pool.head_dim, tq3_pool.page_tokens):
        raise ValueError("the fp8 and tq3 pools differ in kv_heads, head_dim or page_tokens")
    if fp8_pool.device != tq3_pool.device:
        raise ValueError(f"the fp8 pool is on {fp8_pool.device}, the tq3 pool on {tq3_pool.device}")
    if not isinstance(pairs, torch.Tensor):
        pairs = torch.tensor(list(pairs), dtype=torch.int32).reshape(-1, 3)
    if pairs.device.type == "cpu":
        if pairs.dtype != torch.int32 or pairs.dim() != 2 or pairs.shape[1] != 3:
            raise ValueError(f"pairs must be int32 [n][3], got {pairs.dtype} {tuple(pairs.shape)}")
        if pairs.numel():
            src, dst, tokens = pairs[:, 0], pairs[:, 1], pairs[:, 2]
            if src.min() < 0 or src.max() >= fp8_pool.num_pages:
                raise ValueError(f"a source page lies outside the fp8 pool of {fp8_pool.num_pages} pages")
            if dst.min() < 0 or dst.max() >= tq3_pool.num_pages:
                raise ValueError(f"a destination page lies outside the tq3 pool of {tq3_pool.num_pages} pages")
            if tokens.min() < 1 or tokens.max() > fp8_pool.page_tokens:
                raise ValueError(f"pair tokens must lie in [1, {fp8_pool.page_tokens}]")
        pairs = pairs.contiguous().to(fp8_pool.device)
    _check_cuda("pairs", pairs, torch.int32, fp8_pool.device, (-1, 3))
    seed = default_rotation_seed() if rotation_seed is None else rotation_seed
    _call_on(fp8_pool.device, "minimakv_cuda_convert_fp8_to_tq3", fp8_pool.kv_heads, fp8_pool.head_dim,
             fp8_pool.page_tokens, _PTR(fp8_pool.data.data_ptr()), _PTR(tq3_pool.data.data_ptr()),
             fp8_pool.num_pages, tq3_pool.num_pages, _PTR(pairs.data_ptr()), pairs.shape[0], seed,
             _PTR(tq3_pool.error_flag.data_ptr()), _stream(fp8_pool.device))
    if check:
        tq3_pool.check_errors()


# ---- decode ------------------------------------------------------------------------------------------------------

class PagedView:
    """The pages of one pool (one format) for a batch of sequences: seq_pages[s] lists sequence s's page ids (any
    order, but a partly filled page last) and seq_tokens[s] its tokens in this view. Keeps host (CSR) and device
    copies: the plan reads the host lengths, the kernels the device arrays."""

    def __init__(self, pool, seq_pages, seq_tokens):
        if len(seq_pages) != len(seq_tokens):
            raise ValueError(f"{len(seq_pages)} page lists for {len(seq_tokens)} token counts")
        pt = pool.page_tokens
        indptr, ids, last = [0], [], []
        for s, (pages, tokens) in enumerate(zip(seq_pages, seq_tokens)):
            pages = [operator.index(p) for p in pages]
            tokens = operator.index(tokens)  # an int (or numpy / 0-d torch integer), never a float
            if tokens < 0:
                raise ValueError(f"sequence {s}: {tokens} tokens")
            fits = not pages if tokens == 0 else (len(pages) - 1) * pt < tokens <= len(pages) * pt
            if not fits:
                raise ValueError(f"sequence {s}: {tokens} tokens do not fill {len(pages)} pages of {pt} tokens")
            if any(p < 0 or p >= pool.num_pages for p in pages):
                raise ValueError(f"sequence {s}: a page id lies outside the pool of {pool.num_pages} pages")
            ids += pages
            indptr.append(len(ids))
            last.append(tokens - (len(pages) - 1) * pt if pages else pt)
        self.pool = pool
        self.num_seqs = len(seq_tokens)
        self.seq_tokens = [operator.index(t) for t in seq_tokens]
        self.host_page_indptr = torch.tensor(indptr, dtype=torch.int32)
        self.host_page_ids = torch.tensor(ids, dtype=torch.int32)
        self.host_last_page_tokens = torch.tensor(last, dtype=torch.int32)
        self.page_indptr = self.host_page_indptr.to(pool.device)
        self.page_ids = self.host_page_ids.to(pool.device)
        self.last_page_tokens = self.host_last_page_tokens.to(pool.device)


def _check_views(views):
    if not 1 <= len(views) <= 3 or len({v.pool.format for v in views}) != len(views):
        raise ValueError("one to three views, each of another format")
    first = views[0].pool
    for v in views:
        if (v.pool.kv_heads, v.pool.head_dim, v.num_seqs, v.pool.device) != \
                (first.kv_heads, first.head_dim, views[0].num_seqs, first.device):
            raise ValueError("views differ in kv_heads, head_dim, number of sequences or device")
    return first


def _view_arrays(views, host):
    """The per-view pointer arrays of the C calls (host or device copies of the CSR arrays)."""
    def ptrs(attr):
        return _ptr_array([getattr(v, ("host_" if host else "") + attr).data_ptr() for v in views])
    return ptrs("page_indptr"), ptrs("page_ids"), ptrs("last_page_tokens")


class DecodePlan:
    """One decode step's plan over views of different formats, with its device workspace, uploaded on the current
    stream. run() may repeat while the views keep the same lengths. query_tokens: query tokens per sequence, each
    attending to every cached token of its sequence (1: decode; more: speculative decoding's verification, whose
    in-chunk causal part the caller merges)."""

    def __init__(self, views, num_q_heads, sm_scale=None, rotation_seed=None, query_tokens=1):
        first = _check_views(views)
        # An int (or numpy / 0-d torch integer, as PagedView takes), never a float or a bool.
        given = query_tokens
        try:
            query_tokens = None if isinstance(given, bool) else operator.index(given)
        except TypeError:
            query_tokens = None
        if query_tokens is None or query_tokens < 1:
            raise ValueError(f"query_tokens must be an int >= 1, got {given!r}")
        self.views = list(views)
        self.num_seqs, self.num_q_heads, self.query_tokens = views[0].num_seqs, num_q_heads, query_tokens
        self.kv_heads, self.head_dim, self.device = first.kv_heads, first.head_dim, first.device
        self.sm_scale = 1.0 / self.head_dim ** 0.5 if sm_scale is None else float(sm_scale)
        self.rotation_seed = default_rotation_seed() if rotation_seed is None else rotation_seed
        n = len(views)
        self._formats = (_I32 * n)(*[v.pool.format for v in views])
        self._page_tokens = (_I32 * n)(*[v.pool.page_tokens for v in views])
        indptr, _, last = _view_arrays(views, host=True)
        self._handle = _PTR()
        with torch.cuda.device(self.device):  # the plan sizes its split for this device's SMs
            _call("minimakv_cuda_plan_create", self.num_seqs, query_tokens, num_q_heads, self.kv_heads, self.head_dim,
                  self.sm_scale, self.rotation_seed, n, self._formats, self._page_tokens, indptr, last,
                  ctypes.byref(self._handle))
        workspace = _I64()
        items = _I32()
        _call("minimakv_cuda_plan_workspace_bytes", self._handle, ctypes.byref(workspace))
        _call("minimakv_cuda_plan_total_items", self._handle, ctypes.byref(items))
        self.total_items = items.value
        self.workspace = torch.empty(max(1, workspace.value), dtype=torch.uint8, device=self.device)
        self._workspace_stream = torch.cuda.current_stream(self.device)
        _call_on(self.device, "minimakv_cuda_plan_upload", self._handle, _PTR(self.workspace.data_ptr()),
                 _stream(self.device))
        # The workspace's last use (the upload, then each run) and its stream: a run on another stream waits for it.
        self._last_use = torch.cuda.Event()
        self._last_use.record(self._workspace_stream)
        self._last_stream = self._workspace_stream

    def run(self, q, views=None, out=None, lse_log2=None):
        """q: fp32 CUDA [num_seqs][num_q_heads][head_dim] (query_tokens 1) or [num_seqs][query_tokens][num_q_heads]
        [head_dim]. views: the plan's by default, or views of the same formats and lengths (other pages). Returns
        (out fp32 of q's shape, lse_log2 fp32 of q's shape without head_dim, base 2: the LSE of the scaled scores /
        ln 2; -inf for a sequence with no token)."""
        if self._handle is None:
            raise RuntimeError("DecodePlan is closed")
        views = self.views if views is None else list(views)
        if len(views) != len(self.views) or any(
                a.pool.format != b.pool.format or a.pool.page_tokens != b.pool.page_tokens or
                not torch.equal(a.host_page_indptr, b.host_page_indptr) or
                not torch.equal(a.host_last_page_tokens, b.host_last_page_tokens) for a, b in zip(views, self.views)):
            raise ValueError("views differ from the plan's in format or lengths: make a new DecodePlan")
        # The library lays the pages out with the plan's kv_heads and head_dim: a pool of another shape (or on
        # another device) would be read out of bounds, which the device cannot check. (The plan's own views were
        # checked when it was made.)
        for v in (views if views is not self.views else ()):
            if (v.pool.kv_heads, v.pool.head_dim, v.pool.device) != (self.kv_heads, self.head_dim, self.device):
                raise ValueError(f"a view's pool (kv_heads {v.pool.kv_heads}, head_dim {v.pool.head_dim}, "
                                 f"{v.pool.device}) differs from the plan's ({self.kv_heads}, {self.head_dim}, "
                                 f"{self.device})")
        tokens = () if self.query_tokens == 1 else (self.query_tokens,)
        shape = (self.num_seqs, *tokens, self.num_q_heads, self.head_dim)
        _check_cuda("q", q, torch.float32, self.device, shape)
        out = torch.empty(shape, dtype=torch.float32, device=self.device) if out is None else out
        lse_log2 = torch.empty(shape[:-1], dtype=torch.float32, device=self.device) if lse_log2 is None else lse_log2
        _check_cuda("out", out, torch.float32, self.device, shape)
        _check_cuda("lse_log2", lse_log2, torch.float32, self.device, shape[:-1])
        # The workspace came from the caching allocator on the plan's stream; used on another stream it must not be
        # handed out again before this stream's work is done (torch's record_stream contract).
        # Every run rewrites the one workspace, so a run on another stream than the last user's (the upload's or the
        # previous run's) waits for it first. While a graph is being captured no event is waited for or recorded
        # (torch.cuda.graph synchronizes before capture; a captured event could not be waited for outside it).
        stream = torch.cuda.current_stream(self.device)
        if stream != self._workspace_stream:
            self.workspace.record_stream(stream)
        capturing = torch.cuda.is_current_stream_capturing()
        if not capturing and stream != self._last_stream:
            stream.wait_event(self._last_use)
        indptr, ids, last = _view_arrays(views, host=False)
        pages = _ptr_array([v.pool.data.data_ptr() for v in views])
        _call_on(self.device, "minimakv_cuda_decode_run", self._handle, len(views), pages, indptr, ids, last,
                 _PTR(q.data_ptr()), _PTR(self.workspace.data_ptr()), _PTR(out.data_ptr()),
                 _PTR(lse_log2.data_ptr()), _stream(self.device))
        if not capturing:
            self._last_use.record(stream)
            self._last_stream = stream
        return out, lse_log2

    def close(self):
        if getattr(self, "_handle", None) is not None and _lib is not None:
            _lib.minimakv_cuda_plan_destroy(self._handle)
        self._handle = None

    def __del__(self):
        self.close()


def reference_decode(q, views, sm_scale=None, rotation_seed=None):
    """The library's fp64 reference attention (every page decoded by the codecs) on host copies of the pools:
    (out, lse_log2) as CPU fp32 tensors, for checks. q: [num_seqs][num_q_heads][head_dim] or [num_seqs]
    [query_tokens][num_q_heads][head_dim], as DecodePlan.run. Copies whole pools to the host (synchronizes)."""
    first = _check_views(views)
    if q.dim() == 4:
        num_seqs, query_tokens, num_q_heads, head_dim = q.shape
    elif q.dim() == 3:
        (num_seqs, num_q_heads, head_dim), query_tokens = q.shape, 1
    else:
        raise ValueError(f"q must be [num_seqs][(query_tokens)][num_q_heads][head_dim], got {tuple(q.shape)}")
    sm_scale = 1.0 / head_dim ** 0.5 if sm_scale is None else float(sm_scale)
    seed = default_rotation_seed() if rotation_seed is None else rotation_seed
    if q.dtype != torch.float32 or num_seqs != views[0].num_seqs or head_dim != first.head_dim:
        raise ValueError(f"q must be fp32 [{views[0].num_seqs}][num_q_heads][{first.head_dim}], got {q.dtype} "
                         f"{tuple(q.shape)}")
    host_q = q.detach().cpu().contiguous()
    host_pools = [v.pool.data.cpu() for v in views]
    out = torch.empty(q.shape, dtype=torch.float32)
    lse_log2 = torch.empty(q.shape[:-1], dtype=torch.float32)
    n = len(views)
    indptr, ids, last = _view_arrays(views, host=True)
    _call("minimakv_reference_decode_host", num_seqs, query_tokens, num_q_heads, first.kv_heads, head_dim, sm_scale,
          seed, n,
          (_I32 * n)(*[v.pool.format for v in views]), (_I32 * n)(*[v.pool.page_tokens for v in views]),
          (_I64 * n)(*[v.pool.num_pages for v in views]), _ptr_array([p.data_ptr() for p in host_pools]),
          indptr, ids, last, _PTR(host_q.data_ptr()), _PTR(out.data_ptr()), _PTR(lse_log2.data_ptr()))
    return out, lse_log2
