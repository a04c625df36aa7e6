// The Python module: every entry point with its typed signature and named arguments (a wrong type or a
// missing argument is a TypeError that prints the signature), and the decode plan's weight and state
// structs as classes with named fields. The kernel registry (k3/ops/dispatch.py) decides which Python
// calls reach these; model/plan_binding.py builds the structs. The only unit that sees pybind11: torch's
// pybind.h brings it with the casters for tensors (torch/extension.h would add all of libtorch's C++ API,
// three times the compile time).
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>
#include "decode.h"

namespace py = pybind11;
using namespace k3;

namespace {

void bind_structs(py::module_& m) {
  using py::arg;
  py::class_<Matrix>(m, "Matrix", "A Linear's weight for the decode GEMV: bf16 [out, in] (scale empty), or int8 codes and bf16 scales")
      .def(py::init<at::Tensor, at::Tensor>(), arg("weight"), arg("scale"))
      .def_readonly("weight", &Matrix::weight).def_readonly("scale", &Matrix::scale);
  py::class_<NormWeights>(m, "NormWeights", "An RMSNorm's weight and epsilon")
      .def(py::init<at::Tensor, double>(), arg("weight"), arg("eps"))
      .def_readonly("weight", &NormWeights::weight).def_readonly("eps", &NormWeights::eps);
  py::class_<MixNormWeights>(m, "MixNormWeights", "Block AttnRes's mix weights and the RMSNorm it feeds")
      .def(py::init<at::Tensor, at::Tensor, double, NormWeights>(), arg("norm"), arg("proj"), arg("eps"), arg("then"));
  py::class_<Activation>(m, "Activation", "code (0 SiTU, 1 SiLU), beta, linear beta (0: none)")
      .def(py::init<int64_t, double, double>(), arg("code"), arg("beta"), arg("linear_beta"));
  py::class_<KdaWeights>(m, "KdaWeights", "KimiDeltaAttention's decode weights (decode_steps.cpp)")
      .def(py::init<Matrix, Ints, Matrix, Matrix, at::Tensor, at::Tensor, bool, double, Tensors, at::Tensor, double,
                    double>(),
           arg("inputs"), arg("sizes"), arg("f_b"), arg("o_proj"), arg("a_log"), arg("dt_bias"), arg("bounded"),
           arg("lower_bound"), arg("conv"), arg("o_norm"), arg("eps"), arg("scale"));
  py::class_<KdaState>(m, "KdaState", "A KDA step's recurrent pool, conv tail pools and slot index")
      .def(py::init<at::Tensor, Tensors, at::Tensor>(), arg("recurrent"), arg("tails"), arg("index"));
  py::class_<MlaWeights>(m, "MlaWeights", "Gated MLA's decode weights (decode_steps.cpp)")
      .def(py::init<Matrix, Ints, Matrix, Matrix, NormWeights, NormWeights, at::Tensor, at::Tensor, double>(),
           arg("inputs"), arg("sizes"), arg("q_b"), arg("o_proj"), arg("q_a_norm"), arg("kv_a_norm"), arg("w_uk"),
           arg("w_uv"), arg("scale"));
  py::class_<MlaState>(m, "MlaState", "An MLA step's paged cache and the pool rows its new latents go to")
      .def(py::init<at::Tensor, at::Tensor, at::Tensor, int64_t, at::Tensor>(), arg("pool"), arg("tables"),
           arg("lens"), arg("block_size"), arg("new_rows"));
  py::class_<MoeWeights>(m, "MoeWeights", "LatentMoE's decode weights (decode_steps.cpp)")
      .def(py::init<Matrix, at::Tensor, int64_t, bool, double, Matrix, Ints, Matrix, Matrix, Tensors, Activation,
                    NormWeights>(),
           arg("router"), arg("bias"), arg("top_k"), arg("renormalise"), arg("scaling"), arg("inputs"), arg("sizes"),
           arg("up"), arg("shared_down"), arg("bank"), arg("act"), arg("norm"));
  py::class_<MlpWeights>(m, "MlpWeights", "The dense GLU MLP's decode weights")
      .def(py::init<Matrix, Ints, Matrix, Activation>(), arg("inputs"), arg("sizes"), arg("down"), arg("act"));
  py::class_<PlanStep>(m, "PlanStep", "One step of the decode plan (model/plan.py) with the weights its op reads")
      .def(py::init<int64_t, int64_t, std::optional<NormWeights>, std::optional<MixNormWeights>,
                    std::optional<AttentionWeights>, std::optional<FfnWeights>>(),
           arg("op"), arg("layer"), arg("norm") = py::none(), arg("mix") = py::none(), arg("attention") = py::none(),
           arg("ffn") = py::none());
  py::class_<DecodePlan>(m, "DecodePlan", "A model's bound decode plan (make_decode_plan)");
}

void bind_kernels(py::module_& m) {
  using py::arg;
  m.def("bf16_linear", &bf16_linear, arg("x"), arg("w"));
  m.def("bf16_gemm", &bf16_gemm, arg("x"), arg("w"));
  m.def("bf16_widen", &bf16_widen, arg("w"));
  m.def("bf16_head_linear", &bf16_head_linear, arg("x"), arg("w"), arg("transpose"));
  m.def("int8_linear", &int8_linear, arg("x"), arg("q"), arg("s"));
  m.def("int8_dequantize", &int8_dequantize, arg("q"), arg("s"));
  m.def("int8_quantize_into", &int8_quantize_into, arg("w"), arg("q"), arg("s"));
  m.def("mxfp4_linear", &mxfp4_linear, arg("x"), arg("packed"), arg("scale"));
  m.def("mxfp4_gemm", &mxfp4_gemm, arg("x"), arg("packed"), arg("scale"));
  m.def("mxfp4_dequantize", &mxfp4_dequantize, arg("packed"), arg("scale"));
  m.def("mxfp4_glu_expert", &mxfp4_glu_expert, arg("x"), arg("w"), arg("act"), arg("beta"), arg("linear_beta"));
  m.def("mxfp4_moe_token", &mxfp4_moe_token, arg("x"), arg("bank"), arg("ids"), arg("weights"), arg("act"), arg("beta"),
        arg("linear_beta"));
  m.def("mxfp4_moe_tokens", &mxfp4_moe_tokens, arg("x"), arg("bank"), arg("ids"), arg("weights"), arg("act"),
        arg("beta"), arg("linear_beta"));
  m.def("kda_decode_slots", &kda_decode_slots, arg("q"), arg("k"), arg("v"), arg("wq"), arg("wk"), arg("wv"), arg("tq"),
        arg("tk"), arg("tv"), arg("S"), arg("index"), arg("g"), arg("beta"), arg("scale"));
  m.def("kda_chunk", &kda_chunk, arg("q"), arg("k"), arg("v"), arg("g"), arg("beta"), arg("scale"),
        arg("initial_state"), arg("chunk"));
  m.def("short_conv_silu", &short_conv_silu, arg("x"), arg("w"), arg("state"));
  m.def("mla_paged_decode", &mla_paged_decode, arg("q"), arg("pool"), arg("tables"), arg("lens"), arg("block_size"),
        arg("rank"), arg("scale"));
  m.def("attn_res_mix", &attn_res_mix, arg("cands"), arg("query"), arg("eps"));
  m.def("attn_res_mix_weights", &attn_res_mix_weights, arg("cands"), arg("norm"), arg("proj"), arg("eps"));
  m.def("rms_norm_rows", &rms_norm_rows, arg("x"), arg("w"), arg("eps"));
  m.def("gated_rms_norm_rows", &gated_rms_norm_rows, arg("x"), arg("gate"), arg("w"), arg("eps"));
  m.def("kda_gates_rows", &kda_gates_rows, arg("raw"), arg("b"), arg("a_log"), arg("dt_bias"), arg("bounded"),
        arg("lower_bound"));
  m.def("moe_route_rows", &moe_route_rows, arg("logits"), arg("bias"), arg("top_k"), arg("renormalise"), arg("scaling"));
  m.def("glu_rows", &glu_rows, arg("g"), arg("u"), arg("act"), arg("beta"), arg("linear_beta"));
}

void bind_plan(py::module_& m) {
  using py::arg;
  m.def("attention_step", &attention_step, arg("x"), arg("weights"), arg("state"));
  m.def("ffn_step", &ffn_step, arg("x"), arg("weights"));
  m.def("make_decode_plan", &make_decode_plan, arg("embed"), arg("steps"), arg("head"));
  m.def("decode_plan", &decode_plan, arg("plan"), arg("ids"), arg("states"), arg("rows"));
}

void bind_settings(py::module_& m) {
  using py::arg;
  m.def("set_simd", &set_simd, arg("level"));
  m.def("set_gemv_sequential", &set_gemv_sequential, arg("on"));
  m.def("set_prefetch_nta", &set_prefetch_nta, arg("on"));
  m.def("set_int8_activations", &set_int8_activations, arg("on"));
  m.def("set_flush_denormal", &set_flush_denormal, arg("on"));
  m.def("set_part_timing", &set_part_timing, arg("on"));
  m.def("part_seconds", &part_seconds);
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  bind_structs(m);
  bind_kernels(m);
  bind_plan(m);
  bind_settings(m);
}
