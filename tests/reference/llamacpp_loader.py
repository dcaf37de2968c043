"""Loads llama-cpp-python with ggml's "extra buffer types" switched off.

Why: this machine's CPU reports AMX, so a native ggml build routes Q4_1/Q8_0
matmuls to AMX tiles, but the hypervisor does not enable AMX state and the
first `tilezero` dies with SIGILL. With use_extra_bufts = False ggml uses its
plain AVX-512 kernels (for Q4_1 there is no repacked CPU path anyway).
"""
import llama_cpp
import llama_cpp.llama as _llama_module

_default_params = llama_cpp.llama_model_default_params


def _params_without_extra_buffers():
    params = _default_params()
    params.use_extra_bufts = False
    return params


llama_cpp.llama_model_default_params = _params_without_extra_buffers
_llama_module.llama_cpp.llama_model_default_params = _params_without_extra_buffers


def load(model_path, n_ctx, n_threads, logits_all=False):
    return llama_cpp.Llama(model_path=model_path, n_ctx=n_ctx, n_threads=n_threads,
                           n_threads_batch=n_threads, logits_all=logits_all, verbose=False)
