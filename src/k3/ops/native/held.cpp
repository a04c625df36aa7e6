// The check behind a bound decode step (layers/direct.py, Taken.still_held): are the objects a binding
// took still the ones its modules hold, and do its tensors still have their storage? Asked before every
// decode step of every layer, with the layer's objects evicted by the weight streams since the last
// step: in the interpreter the same test was some 65 reads a layer, one cache miss after another. Here each round of loads is prefetched for every entry first, so the misses overlap.

namespace {

inline void prefetch_object(const void* p) { _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T0); }

}  // namespace

// where[i].get(names[i]) is values[i] for every i (a missing key reads as None), and tensors[j].data_ptr()
// == ptrs[j] for every j. All five are tuples of equal pairwise lengths.
bool objects_held(pybind11::tuple where, pybind11::tuple names, pybind11::tuple values, pybind11::tuple tensors,
                  pybind11::tuple ptrs) {
  const Py_ssize_t n = PyTuple_GET_SIZE(where.ptr()), m = PyTuple_GET_SIZE(tensors.ptr());
  TORCH_CHECK(PyTuple_GET_SIZE(names.ptr()) == n && PyTuple_GET_SIZE(values.ptr()) == n &&
              PyTuple_GET_SIZE(ptrs.ptr()) == m, "objects_held: mismatched lengths");
  for (Py_ssize_t i = 0; i < n; ++i) {
    prefetch_object(PyTuple_GET_ITEM(where.ptr(), i));
    prefetch_object(PyTuple_GET_ITEM(names.ptr(), i));
  }
  for (Py_ssize_t j = 0; j < m; ++j) {
    prefetch_object(PyTuple_GET_ITEM(tensors.ptr(), j));
    prefetch_object(PyTuple_GET_ITEM(ptrs.ptr(), j));
  }
  std::vector<const c10::TensorImpl*> impls(m);
  for (Py_ssize_t j = 0; j < m; ++j) {
    PyObject* t = PyTuple_GET_ITEM(tensors.ptr(), j);
    TORCH_CHECK(THPVariable_Check(t), "objects_held: tensors must be tensors");
    impls[j] = THPVariable_Unpack(t).unsafeGetTensorImpl();
    prefetch_object(impls[j]);
  }
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* got = PyDict_GetItemWithError(PyTuple_GET_ITEM(where.ptr(), i), PyTuple_GET_ITEM(names.ptr(), i));
    if (got == nullptr) {
      if (PyErr_Occurred()) throw pybind11::error_already_set();
      got = Py_None;
    }
    if (got != PyTuple_GET_ITEM(values.ptr(), i)) return false;
  }
  for (Py_ssize_t j = 0; j < m; ++j) prefetch_object(impls[j]->storage().unsafeGetStorageImpl());
  for (Py_ssize_t j = 0; j < m; ++j) {
    const auto p = reinterpret_cast<intptr_t>(THPVariable_Unpack(PyTuple_GET_ITEM(tensors.ptr(), j)).data_ptr());
    if (p != PyLong_AsSsize_t(PyTuple_GET_ITEM(ptrs.ptr(), j))) return false;
  }
  return true;
}
