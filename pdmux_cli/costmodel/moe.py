"""Which fused-MoE kernel SGLang runs for a model's routed experts on a GPU, and its measured efficiency.

SGLang runs one MoE layer's routed experts as one fused operator: top-k routing of the router's logits,
the grouped gate+up and down GEMMs over the experts the batch touches, the gated activation and the
weighted combine. Which runner does it depends on the GPU and the model (SGLang 0.5.23, ``--moe-runner-backend
auto``, ``--moe-a2a-backend none``, EP 1):

- on SM100 (compute capability 10.x: B200, B300, GB200, GB300) ``flashinfer_trtllm`` (FlashInfer's TRT-LLM-gen
  fused MoE) for the Qwen3 MoE family with bf16, fp8 or FP4 experts
  (``srt/arg_groups/model_overrides/qwen3_moe.py`` ``_qwen3_moe_family_overrides``) and the DeepSeek family
  with bf16 or fp8 experts (``srt/arg_groups/overrides.py`` ``_deepseek_moe_quant_resolution``, LongCat-Flash
  excepted); ``flashinfer_mxfp4`` for gpt-oss's MXFP4 experts (``srt/arg_groups/model_overrides/gpt_oss.py``),
  whose TRT-LLM-gen kernel quantizes activations to MXFP8 (``srt/layers/quantization/mxfp4.py``), timed by
  aiconfigurator as ``sglang_flashinfer_trtllm_moe`` w4a8_mxfp4_mxfp8;
- elsewhere, and for every other model, ``triton`` (``fused_moe``: ``moe_align_block_size`` and two Triton
  grouped GEMMs; ``srt/layers/quantization/unquant.py``, ``fp8.py``: DeepGEMM only with an all-to-all
  backend); gpt-oss off SM100 runs ``triton_kernel`` (the ``triton_kernels`` package's MXFP4 ``matmul_ogs``,
  ``gpt_oss.py``), which no public table measures: aiconfigurator's w4a16_mxfp4 rows off SM100 time SGLang's
  ``triton`` runner on MXFP4 weights (``kernel_source`` ``sglang_fused_moe_triton``, reading them at about a
  quarter of the HBM's bandwidth), another kernel, so gpt-oss there keeps the GEMM-based experts.

The measured efficiencies (``profiles/efficiency/<gpu>.yaml`` ``moe``, fitted to aiconfigurator's SGLang
MoE tables by ``benchmarks/fit_efficiency.py``) are keyed ``"<kernel>/<dtype>"``: dtype ``bf16``,
``fp8_block``, ``w4a16_mxfp4`` or ``w4a8_mxfp4_mxfp8`` (:data:`MOE_DTYPES`). Pure functions; no I/O.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..util.errors import Finding, InputError
from .efficiency import EfficiencyProfile, OperatorEfficiency

#: The runners of aiconfigurator's SGLang MoE table (``benchmarks/aic_extract.py`` ``MOE_KERNELS``); one of
#: them stands in for the other in the same dtype. SGLang's ``triton_kernel`` (gpt-oss off SM100) is in no
#: table.
MOE_KERNELS = ("triton", "flashinfer_trtllm")
#: The expert dtypes of the table, and whether their GEMMs run fp8 tensor-core math.
MOE_DTYPES = {"bf16": False, "fp8_block": True, "w4a16_mxfp4": False, "w4a8_mxfp4_mxfp8": True}

#: SGLang 0.5.23's Qwen3 MoE family (``srt/arg_groups/model_overrides/qwen3_moe.py`` ``_register_for``).
QWEN3_MOE_ARCHS = frozenset({"Qwen3MoeForCausalLM", "Qwen3VLMoeForConditionalGeneration",
                             "Qwen3NextForCausalLM", "Qwen3_5MoeForConditionalGeneration",
                             "InternS2PreviewForConditionalGeneration", "Qwen3_5ForConditionalGeneration",
                             "Qwen4ExpForConditionalGeneration"})
#: SGLang 0.5.23's DeepSeek family (``srt/arg_groups/overrides.py`` ``_DEEPSEEK_FAMILY_ARCHS``) less
#: LongCat-Flash, whose top-k spans zero-expert logits that TRT-LLM-gen's routing cannot see.
DEEPSEEK_ARCHS = frozenset({"DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM",
                            "KimiK25ForConditionalGeneration", "MistralLarge3ForCausalLM",
                            "PixtralForConditionalGeneration", "GlmMoeDsaForCausalLM",
                            "Glm5NextForConditionalGeneration", "HYV4ForCausalLM", "HYV4ForCausalLMNextN",
                            "Dots3NoteForCausalLM"})
GPT_OSS_ARCHS = frozenset({"GptOssForCausalLM"})

#: Bytes per routed-expert weight of each dtype (MXFP4: 4 bits plus one 8-bit scale per 32 weights).
DTYPE_BYTES = {"bf16": 2.0, "fp8_block": 1.0, "w4a16_mxfp4": 4.25 / 8, "w4a8_mxfp4_mxfp8": 4.25 / 8}


def is_sm100(compute_capability: tuple[int, int]) -> bool:
    """SGLang's ``is_sm100_supported``: compute capability major 10 (``srt/utils/common.py``)."""
    return compute_capability[0] == 10


#: SGLang's ``--moe-runner-backend`` values pdmux can time (a measured table each: :data:`MOE_KERNELS`), with
#: ``auto`` (the release's own choice).
MOE_RUNNER_BACKENDS = ("auto", *MOE_KERNELS)


def moe_kernel(model: Any, compute_capability: tuple[int, int],
               expert_bytes_per_param: float | None = None, *,
               qwen3_bf16_trtllm: bool = True, runner: str | None = None) -> tuple[str, str] | None:
    """``(kernel, dtype)`` of the fused MoE SGLang 0.5.23 runs for ``model``'s routed experts on a GPU of
    ``compute_capability`` (module docstring), or ``None`` for a dense model or experts in a format the
    table has no dtype for. ``expert_bytes_per_param``: the bytes each expert weight is read at (``None``:
    the model's own format, ``model.weight_dtype``); 2 is bf16, 1 block fp8, 4.25/8 MXFP4.
    ``qwen3_bf16_trtllm``: ``False`` for a release before 0.5.8, whose SM100 rule gives the Qwen3 MoE family's
    bf16 experts the Triton runner (:attr:`pdmux_cli.sglang.release_defaults.ReleaseDefaults.\
qwen3_moe_bf16_trtllm`). ``runner``: SGLang's ``--moe-runner-backend`` (:data:`MOE_RUNNER_BACKENDS`;
    ``None`` or ``"auto"``: the rule above); ``"flashinfer_trtllm"`` needs SM100 (SGLang's TRT-LLM-gen
    kernels are built for it alone). Raises :class:`InputError` for another value, or
    ``flashinfer_trtllm`` on another GPU."""
    if runner not in (None, *MOE_RUNNER_BACKENDS):
        raise InputError("{param_flag} must be one of {choices} (the fused MoE kernels pdmux has measured), "
                         "got {value!r}", param="moe_runner_backend",
                         values={"choices": ", ".join(MOE_RUNNER_BACKENDS), "value": runner})
    if runner == "flashinfer_trtllm" and not is_sm100(compute_capability):
        raise InputError("{param_flag} flashinfer_trtllm runs on SM100 GPUs only (B200, B300, GB200, "
                         "GB300): give triton or auto", param="moe_runner_backend", values={})
    if not getattr(model, "num_experts", 0):
        return None
    if expert_bytes_per_param is None:
        dtype = {"bf16": "bf16", "fp8": "fp8_block", "mxfp4": "mxfp4"}.get(model.weight_dtype)
    else:
        dtype = {2.0: "bf16", 1.0: "fp8_block", 4.25 / 8: "mxfp4"}.get(float(expert_bytes_per_param))
    if dtype is None:
        return None
    if runner not in (None, "auto"):  # the user's --moe-runner-backend, over the release's rule
        return runner, ("w4a8_mxfp4_mxfp8" if dtype == "mxfp4" and runner == "flashinfer_trtllm"
                        else "w4a16_mxfp4" if dtype == "mxfp4" else dtype)
    arch = (tuple(getattr(model, "architectures", ())) or ("",))[0]
    sm100 = is_sm100(compute_capability)
    if dtype == "mxfp4":
        if sm100 and arch in GPT_OSS_ARCHS:
            return "flashinfer_trtllm", "w4a8_mxfp4_mxfp8"
        return ("triton_kernel" if arch in GPT_OSS_ARCHS else "triton"), "w4a16_mxfp4"
    if sm100 and arch in QWEN3_MOE_ARCHS and (dtype != "bf16" or qwen3_bf16_trtllm):
        return "flashinfer_trtllm", dtype
    if sm100 and arch in DEEPSEEK_ARCHS:
        return "flashinfer_trtllm", dtype
    return "triton", dtype


def for_moe(
    profile: EfficiencyProfile, kind: tuple[str, str] | None
) -> tuple[EfficiencyProfile, Finding | None]:
    """``profile`` with ``moe_routed`` set to the measured efficiency of ``kind`` (``(kernel, dtype)`` from
    :func:`moe_kernel`), and a finding (``None`` when measured on this profile's GPU, or for a dense model).

    A kernel not measured in that dtype on this GPU takes the other kernel's fit of the same dtype (with a
    note); none at all leaves ``moe_routed`` ``None``: the routed experts are then timed as two GEMMs with
    the linear layers' GEMM efficiency (the model before MoE measurements), and the note says so."""
    if kind is None:
        return profile, None
    kernel, dtype = kind
    found = profile.moe_section(kernel, dtype)
    if found is not None:
        return replace(profile, moe_routed=found), None
    if kernel not in MOE_KERNELS:
        return profile, Finding("costmodel.moe.unknown_kernel", {"kernel": kernel, "dtype": dtype})
    for other in MOE_KERNELS:
        found = profile.moe_section(other, dtype)
        if found is not None:
            return replace(profile, moe_routed=found), Finding("costmodel.moe.stand_in", {
                "kernel": kernel, "dtype": dtype, "fitted_on": profile.fitted_on, "other": other})
    return profile, Finding("costmodel.moe.none", {"dtype": dtype, "fitted_on": profile.fitted_on})


def moe_flops_per_s(gpu: Any, kind: tuple[str, str] | None) -> float | None:
    """The dense FLOP/s the routed experts' GEMMs run at on ``gpu`` (a
    :class:`pdmux_cli.catalog.hardware.Gpu`): the fp8 peak for the fp8-math dtypes (:data:`MOE_DTYPES`) where
    the GPU has fp8 tensor cores, else the 16-bit peak; ``None`` for a dense model."""
    if kind is None:
        return None
    fp8 = MOE_DTYPES.get(kind[1], False) and bool(getattr(gpu, "fp8_dense_flops", 0))
    return float(gpu.dense_flops("fp8" if fp8 else ("bf16" if gpu.bf16_dense_flops else "fp16")))


__all__ = ["DTYPE_BYTES", "MOE_DTYPES", "MOE_KERNELS", "OperatorEfficiency", "for_moe", "is_sm100",
           "moe_flops_per_s", "moe_kernel"]
