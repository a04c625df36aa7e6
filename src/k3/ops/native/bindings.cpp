// What Python sees: the kernels as torch operators with schemas (TORCH_LIBRARY, below), and a pybind11
// module with the decode plan (its weight and state structs as classes with named fields: a wrong type or
// a missing argument is a TypeError that prints the signature; model/plan_binding.py builds them) and the
// settings. The only unit that sees pybind11: torch's pybind.h brings it with the casters for tensors
// (torch/extension.h would add all of libtorch's C++ API, much slower to compile).
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/library.h>
#include <ATen/core/dispatch/Dispatcher.h>
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
  py::class_<KdaWeights>(m, "KdaWeights", "KimiDeltaAttention's decode weights (decode.h)")
      .def(py::init<Matrix, Ints, Matrix, Matrix, at::Tensor, at::Tensor, bool, double, Tensors, at::Tensor, double,
                    double>(),
           arg("inputs"), arg("sizes"), arg("f_b"), arg("o_proj"), arg("a_log"), arg("dt_bias"), arg("bounded"),
           arg("lower_bound"), arg("conv"), arg("o_norm"), arg("eps"), arg("scale"));
  py::class_<KdaState>(m, "KdaState", "A KDA step's recurrent pool, conv tail pools and slot index; the rows "
                                     "a sequence brings (positions) and where a verify window's inputs go (replay)")
      .def(py::init<at::Tensor, Tensors, at::Tensor, int64_t, Tensors>(), arg("recurrent"), arg("tails"), arg("index"),
           arg("positions") = 1, arg("replay") = Tensors{})
      .def_readonly("recurrent", &KdaState::recurrent).def_readonly("replay", &KdaState::replay);
  py::class_<MlaWeights>(m, "MlaWeights", "Gated MLA's decode weights (decode.h)")
      .def(py::init<Matrix, Ints, Matrix, Matrix, NormWeights, NormWeights, at::Tensor, at::Tensor, double>(),
           arg("inputs"), arg("sizes"), arg("q_b"), arg("o_proj"), arg("q_a_norm"), arg("kv_a_norm"), arg("w_uk"),
           arg("w_uv"), arg("scale"));
  py::class_<MlaState>(m, "MlaState", "An MLA step's paged cache and the pool rows its new latents go to")
      .def(py::init<at::Tensor, at::Tensor, at::Tensor, int64_t, at::Tensor>(), arg("pool"), arg("tables"),
           arg("lens"), arg("block_size"), arg("new_rows"));
  py::class_<MoeWeights>(m, "MoeWeights", "LatentMoE's decode weights (decode.h)")
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
  m.def("set_gemv_sequential_bytes", &set_gemv_sequential_bytes, arg("bytes"));
  m.def("set_prefetch_nta", &set_prefetch_nta, arg("on"));
  m.def("set_int8_activations", &set_int8_activations, arg("on"));
  m.def("set_bf16_dot", &set_bf16_dot, arg("on"));
  m.def("set_flush_denormal", &set_flush_denormal, arg("on"));
  m.def("set_part_timing", &set_part_timing, arg("on"));
  m.def("part_seconds", &part_seconds);
  m.def("read_sum", &read_sum, arg("buffer"), "The wrapping sum of a buffer's 8-byte words, read by every thread "
                                              "(read_probe.cpp: the read-bandwidth probe)");
}

// The names of the operators this library registered (TORCH_LIBRARY(k3) below), from torch's dispatcher.
std::vector<std::string> operator_names() {
  std::vector<std::string> names;
  for (const auto& op : c10::Dispatcher::singleton().getAllOpNames())
    if (op.name.rfind("k3::", 0) == 0) names.push_back(op.name.substr(4));
  return names;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  bind_structs(m);
  bind_plan(m);
  bind_settings(m);
  m.def("operator_names", &operator_names);
}

// The kernels as torch operators (torch.ops.k3.NAME): each with its schema, so torch checks the arguments,
// knows which tensors a kernel writes in place ((a!): kda_decode_slots' state and conv tails,
// int8_quantize_into's outputs) and shows the signature in errors. Each is the CPU key's kernel: there is
// no autograd formula (the kernel registry, k3/ops/dispatch.py, sends autograd to the references).
TORCH_LIBRARY(k3, m) {
  const auto cpu = [](auto fn) { return torch::dispatch(c10::DispatchKey::CPU, fn); };
  m.def("bf16_linear(Tensor x, Tensor w) -> Tensor", cpu(&bf16_linear));
  m.def("bf16_gemm(Tensor x, Tensor w) -> Tensor", cpu(&bf16_gemm));
  m.def("bf16_widen(Tensor w) -> Tensor", cpu(&bf16_widen));
  m.def("bf16_dot_gemm(Tensor x, Tensor w) -> Tensor", cpu(&bf16_dot_gemm));
  m.def("mxfp4_dot_gemm(Tensor x, Tensor packed, Tensor scale) -> Tensor", cpu(&mxfp4_dot_gemm));
  m.def("bf16_head_linear(Tensor x, Tensor w, bool transpose) -> Tensor", cpu(&bf16_head_linear));
  m.def("int8_linear(Tensor x, Tensor q, Tensor s) -> Tensor", cpu(&int8_linear));
  m.def("int8_dequantize(Tensor q, Tensor s) -> Tensor", cpu(&int8_dequantize));
  m.def("int8_quantize_into(Tensor w, Tensor(a!) q, Tensor(b!) s) -> bool", cpu(&int8_quantize_into));
  m.def("mxfp4_linear(Tensor x, Tensor packed, Tensor scale) -> Tensor", cpu(&mxfp4_linear));
  m.def("mxfp4_gemm(Tensor x, Tensor packed, Tensor scale) -> Tensor", cpu(&mxfp4_gemm));
  m.def("mxfp4_dequantize(Tensor packed, Tensor scale) -> Tensor", cpu(&mxfp4_dequantize));
  m.def("mxfp4_glu_expert(Tensor x, Tensor[] w, int act, float beta, float linear_beta) -> Tensor", cpu(&mxfp4_glu_expert));
  m.def("mxfp4_moe_token(Tensor x, Tensor[] bank, int[] ids, float[] weights, int act, float beta, "
        "float linear_beta) -> Tensor", cpu(&mxfp4_moe_token));
  m.def("mxfp4_moe_tokens(Tensor x, Tensor[] bank, Tensor ids, Tensor weights, int act, float beta, "
        "float linear_beta) -> Tensor", cpu(&mxfp4_moe_tokens));
  m.def("kda_decode_slots(Tensor q, Tensor k, Tensor v, Tensor wq, Tensor wk, Tensor wv, Tensor(a!) tq, "
        "Tensor(b!) tk, Tensor(c!) tv, Tensor(d!) S, Tensor index, Tensor g, Tensor beta, float scale) -> Tensor",
        cpu(&kda_decode_slots));
  m.def("kda_window_slots(Tensor q, Tensor k, Tensor v, Tensor wq, Tensor wk, Tensor wv, Tensor(a!) tq, "
        "Tensor(b!) tk, Tensor(c!) tv, Tensor(d!) S, Tensor index, Tensor g, Tensor beta, float scale) -> Tensor",
        cpu(&kda_window_slots));
  m.def("kda_chunk(Tensor q, Tensor k, Tensor v, Tensor g, Tensor beta, float scale, Tensor initial_state, "
        "int chunk) -> Tensor[]", cpu(&kda_chunk));
  m.def("short_conv_silu(Tensor x, Tensor w, Tensor state) -> Tensor[]", cpu(&short_conv_silu));
  m.def("mla_paged_decode(Tensor q, Tensor pool, Tensor tables, Tensor lens, int block_size, int rank, "
        "float scale) -> Tensor", cpu(&mla_paged_decode));
  m.def("attn_res_mix(Tensor[] cands, Tensor query, float eps) -> Tensor", cpu(&attn_res_mix));
  m.def("attn_res_mix_weights(Tensor[] cands, Tensor norm, Tensor proj, float eps) -> Tensor", cpu(&attn_res_mix_weights));
  m.def("rms_norm_rows(Tensor x, Tensor w, float eps) -> Tensor", cpu(&rms_norm_rows));
  m.def("gated_rms_norm_rows(Tensor x, Tensor gate, Tensor w, float eps) -> Tensor", cpu(&gated_rms_norm_rows));
  m.def("kda_gates_rows(Tensor raw, Tensor b, Tensor a_log, Tensor dt_bias, bool bounded, float lower_bound) "
        "-> Tensor[]", cpu(&kda_gates_rows));
  m.def("moe_route_rows(Tensor logits, Tensor bias, int top_k, bool renormalise, float scaling) -> Tensor[]",
        cpu(&moe_route_rows));
  m.def("glu_rows(Tensor g, Tensor u, int act, float beta, float linear_beta) -> Tensor", cpu(&glu_rows));
}
