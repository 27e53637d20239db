// The compiled module `pejit._pejit`: the public Session (include/pejit/pejit.h) for Python.
// Steps and runs release the GIL, so Python threads (and the engine's background pipeline)
// keep going while a batch trains; parameters are numpy arrays over the session's own storage.
#include "python/src/ext.h"

#include "runtime/session_access.h"

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

namespace pejit::python {

using runtime::SessionAccess;

namespace {

PyObject* g_error = nullptr;
PyObject* g_program_error = nullptr;

SessionOptions make_options(const std::map<std::string, int64_t>& dims, uint64_t seed,
                            const std::string& optimizer, float lr, float weight_decay, float clip,
                            const std::string& mode, int lookahead, bool merge_equal,
                            const std::string& schedules, int threads,
                            const std::string& distributed, const std::string& kernel_cache_dir,
                            double kernel_cache_max_mb, bool batches_repeat) {
  SessionOptions o;
  if (kernel_cache_max_mb <= 0)
    throw Error("kernel_cache_max_mb must be positive, got " + std::to_string(kernel_cache_max_mb));
  o.compile.kernel_cache_dir = kernel_cache_dir;
  o.compile.kernel_cache_max_bytes = static_cast<uint64_t>(kernel_cache_max_mb * 1024.0 * 1024.0);
  o.threads = threads;
  o.distributed = distributed;
  o.dims = dims;
  o.seed = seed;
  o.optimizer = optimizer;
  o.lr = lr;
  o.weight_decay = weight_decay;
  o.clip = clip;
  o.mode = mode;
  o.lookahead = lookahead;
  o.merge_equal = merge_equal;
  o.batches_repeat = batches_repeat;
  if (!schedules.empty())
    o.compile.schedules = ScheduleDB::load(schedules);
  return o;
}

// A batch for `entry`: a pejit.Value as it is, anything else converted by the entry's type.
Value to_batch(PySession& ps, const std::string& entry, py::handle o) {
  if (py::isinstance<PyValue>(o))
    return o.cast<PyValue&>().v;
  const ir::FnDecl* f = ps.module().fn(entry);
  if (!f || !f->is_entry)
    throw Error("no entry named '" + entry + "'");
  if (f->params.size() != 1)
    throw Error("entry '" + entry + "' takes " + std::to_string(f->params.size()) +
                " arguments; step and run pass one (the batch)");
  return SessionAccess::wrap(to_value(ps, o, f->params[0].type, entry + "(batch)"));
}

py::array param_view(py::object self, const std::string& name) {
  PySession& ps = self.cast<PySession&>();
  auto lock = ps.lock();
  std::vector<int64_t> shape = ps.s.param_shape(name);
  float* p = ps.s.param_data(name);
  std::vector<py::ssize_t> sh(shape.begin(), shape.end());
  // The array's base is the session object: the session outlives every view of its storage.
  return py::array_t<float>(sh, p, self);
}

py::dict stats_dict(PySession& ps) {
  auto lock = ps.lock();
  SessionStats s = ps.s.stats();
  py::dict d;
  d["generic_batches"] = s.generic_batches;
  d["specialized_batches"] = s.specialized_batches;
  d["generic_seconds"] = s.generic_seconds;
  d["specialized_seconds"] = s.specialized_seconds;
  d["plan_hits"] = s.plan_hits;
  d["plan_misses"] = s.plan_misses;
  d["plans_prefetched"] = s.plans_prefetched;
  d["plan_evictions"] = s.plan_evictions;
  d["kernels"] = ps.s.kernels().size();
  d["jit_batches"] = s.jit_batches;
  d["jit_seconds"] = s.jit_seconds;
  d["interpreted_groups"] = s.interpreted_groups;
  d["interpreted_seconds"] = s.interpreted_seconds;
  d["kernels_compiled"] = s.kernels_compiled;
  d["kernels_cached"] = s.kernels_cached;
  d["encoded_examples"] = ps.encoded_examples();
  d["rank"] = s.rank;
  d["ranks"] = s.ranks;
  d["grad_reductions"] = s.grad_reductions;
  d["reductions_overlapped"] = s.reductions_overlapped;
  d["comm_wait_seconds"] = s.comm_wait_seconds;
  d["comm_dense_bytes"] = s.comm_dense_bytes;
  d["comm_sparse_bytes"] = s.comm_sparse_bytes;
  py::dict per;
  for (const auto& [name, e] : s.per_entry) {
    py::dict x;
    x["batches"] = e.batches;
    x["plan_hits"] = e.plan_hits;
    x["plan_misses"] = e.plan_misses;
    x["plans_cached"] = e.plans_cached;
    x["respecializations"] = e.respecializations;
    per[py::str(name)] = x;
  }
  d["per_entry"] = per;
  d["respecialized"] = s.respecialized;
  d["reused"] = s.reused;
  return d;
}

} // namespace

PYBIND11_MODULE(_pejit, m) {
  m.doc() = "pejit: a specializing JIT for tree-structured training programs";

  g_error = PyErr_NewException("pejit.Error", PyExc_Exception, nullptr);
  py::tuple bases = py::make_tuple(py::handle(g_error), py::handle(PyExc_ValueError));
  g_program_error = PyErr_NewException("pejit.ProgramError", bases.ptr(), nullptr);
  m.attr("Error") = py::handle(g_error);
  m.attr("ProgramError") = py::handle(g_program_error);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p)
        std::rethrow_exception(p);
    } catch (const ProgramError& e) {
      PyErr_SetString(g_program_error, e.what());
    } catch (const Error& e) {
      PyErr_SetString(g_error, e.what());
    }
  });

  py::class_<PyValue>(m, "Value", "A value of the language held by pejit (an ADT value, a batch).")
      .def("to_python", [](const PyValue& v) { return from_value(SessionAccess::unwrap(v.v)); })
      .def("__len__", [](const PyValue& v) { return v.v.size(); })
      .def("__repr__", [](const PyValue& v) { return "pejit.Value(" + v.v.describe() + ")"; });

  py::class_<Optimizer>(m, "Optimizer",
                        "An optimizer with its own state, for Session.step(..., optimizer=).")
      .def(py::init<const std::string&, float, float, float>(), py::arg("kind") = "adagrad",
           py::arg("lr") = 0.05f, py::arg("weight_decay") = 0.0f, py::arg("clip") = 0.0f);

  py::class_<PySession>(m, "Session", "A model with parameters, an optimizer and an engine.")
      .def_static(
          "from_file",
          [](const std::string& path, const std::map<std::string, int64_t>& dims, uint64_t seed,
             const std::string& optimizer, float lr, float weight_decay, float clip,
             const std::string& mode, int lookahead, bool merge_equal,
             const std::string& schedules, int threads, const std::string& distributed,
             const std::string& kernel_cache_dir, double kernel_cache_max_mb,
             bool batches_repeat) {
            auto o = make_options(dims, seed, optimizer, lr, weight_decay, clip, mode, lookahead,
                                  merge_equal, schedules, threads, distributed, kernel_cache_dir,
                                  kernel_cache_max_mb, batches_repeat);
            return std::make_unique<PySession>(Session::from_file(path, o));
          },
          py::arg("path"), py::arg("dims") = std::map<std::string, int64_t>{}, py::arg("seed") = 1,
          py::arg("optimizer") = "adagrad", py::arg("lr") = 0.05f, py::arg("weight_decay") = 0.0f,
          py::arg("clip") = 0.0f, py::arg("mode") = "auto", py::arg("lookahead") = 8,
          py::arg("merge_equal") = true, py::arg("schedules") = "", py::arg("threads") = 0,
          py::arg("distributed") = "off", py::arg("kernel_cache_dir") = "",
          py::arg("kernel_cache_max_mb") = 256.0, py::arg("batches_repeat") = false)
      .def_static(
          "from_source",
          [](const std::string& text, const std::string& name,
             const std::map<std::string, int64_t>& dims, uint64_t seed,
             const std::string& optimizer, float lr, float weight_decay, float clip,
             const std::string& mode, int lookahead, bool merge_equal,
             const std::string& schedules, int threads, const std::string& distributed,
             const std::string& kernel_cache_dir, double kernel_cache_max_mb,
             bool batches_repeat) {
            auto o = make_options(dims, seed, optimizer, lr, weight_decay, clip, mode, lookahead,
                                  merge_equal, schedules, threads, distributed, kernel_cache_dir,
                                  kernel_cache_max_mb, batches_repeat);
            return std::make_unique<PySession>(Session::from_source(text, name, o));
          },
          py::arg("text"), py::arg("name") = "<python>",
          py::arg("dims") = std::map<std::string, int64_t>{}, py::arg("seed") = 1,
          py::arg("optimizer") = "adagrad", py::arg("lr") = 0.05f, py::arg("weight_decay") = 0.0f,
          py::arg("clip") = 0.0f, py::arg("mode") = "auto", py::arg("lookahead") = 8,
          py::arg("merge_equal") = true, py::arg("schedules") = "", py::arg("threads") = 0,
          py::arg("distributed") = "off", py::arg("kernel_cache_dir") = "",
          py::arg("kernel_cache_max_mb") = 256.0, py::arg("batches_repeat") = false)
      .def(
          "make",
          [](PySession& ps, const std::string& ctor, py::sequence fields) {
            auto lock = ps.lock();
            py::list all;
            all.append(py::str(ctor));
            for (auto f : fields)
              all.append(f);
            if (ctor == "Nil" || ctor == "Cons")
              throw Error("build lists as Python lists (Nil and Cons are for C++)");
            auto [a, c] = ps.module().ctor(ctor);
            if (a < 0)
              throw Error("the model has no constructor '" + ctor + "'");
            ir::Type t = ir::t_adt(ps.module().adts()[static_cast<size_t>(a)]->name);
            return PyValue{SessionAccess::wrap(to_value(ps, py::tuple(all), t, ctor))};
          },
          py::arg("ctor"), py::arg("fields"),
          "An ADT value by constructor name; fields are converted by their declared types.")
      .def(
          "to_batch",
          [](PySession& ps, const std::string& entry, py::handle batch) {
            auto lock = ps.lock();
            return PyValue{to_batch(ps, entry, batch)};
          },
          py::arg("entry"), py::arg("batch"),
          "Converts a batch once (a list of trees, tuples, Values) for repeated steps.")
      .def(
          "batch",
          [](PySession& ps, const std::shared_ptr<const PyDataset>& ds,
             py::array_t<int64_t, py::array::c_style | py::array::forcecast> idx,
             const std::string& entry) {
            auto lock = ps.lock();
            return PyValue{SessionAccess::wrap(
                ps.encode(ds, idx.data(), static_cast<size_t>(idx.size()), entry))};
          },
          py::arg("data"), py::arg("indices"), py::arg("entry") = "loss",
          "Examples data[i] for i in indices as one batch, encoded as `pejit train` does: each "
          "example once, kept for the later batches that hold it.")
      .def(
          "step",
          [](PySession& ps, const std::string& entry, py::handle batch, Optimizer* opt) {
            auto lock = ps.lock();
            Value b = to_batch(ps, entry, batch);
            py::gil_scoped_release nogil;
            return opt ? ps.s.step(entry, b, *opt) : ps.s.step(entry, b);
          },
          py::arg("entry"), py::arg("batch"), py::arg("optimizer") = nullptr,
          "One training step (value, gradients, update); returns the loss. Releases the GIL.")
      .def(
          "run",
          [](PySession& ps, const std::string& entry, py::handle batch) {
            auto lock = ps.lock();
            Value b = to_batch(ps, entry, batch);
            Value out;
            {
              py::gil_scoped_release nogil;
              out = ps.s.run(entry, b);
            }
            return from_value(SessionAccess::unwrap(out));
          },
          py::arg("entry"), py::arg("batch"), "Runs an entry without gradients.")
      .def(
          "prefetch",
          [](PySession& ps, const std::string& entry, py::sequence batches) {
            auto lock = ps.lock();
            std::vector<Value> bs;
            for (auto b : batches)
              bs.push_back(to_batch(ps, entry, b));
            ps.s.prefetch(entry, bs);
          },
          py::arg("entry"), py::arg("batches"),
          "Batches that come next: in auto mode they are planned in the background.")
      .def(
          "entry_status",
          [](PySession& ps, const std::string& e) {
            auto lock = ps.lock();
            return ps.s.entry_status(e);
          },
          py::arg("entry"),
          "The explain text: 'specialized: N plans cached', 'generic: <why>' or 'not "
          "specialized yet'.")
      .def_property_readonly("entries",
                             [](PySession& ps) {
                               auto lock = ps.lock();
                               return ps.s.entries();
                             })
      .def(
          "add_source",
          [](PySession& ps, const std::string& text, const std::string& name) {
            auto lock = ps.lock();
            py::gil_scoped_release nogil; // waits for the background pipeline first
            return ps.s.add_source(text, name);
          },
          py::arg("text"), py::arg("name") = "<python>",
          "Adds or replaces definitions; returns the entries whose dependency cone changed "
          "(only those are specialized again).")
      .def(
          "init_params",
          [](PySession& ps, uint64_t seed) {
            auto lock = ps.lock();
            ps.s.init_params(seed);
          },
          py::arg("seed"))
      .def_property_readonly("param_names",
                             [](PySession& ps) {
                               auto lock = ps.lock();
                               return ps.s.param_names();
                             })
      .def("param_shape",
           [](PySession& ps, const std::string& n) {
             auto lock = ps.lock();
             return ps.s.param_shape(n);
           })
      .def("param", &param_view, py::arg("name"),
           "The parameter as a numpy array over the session's storage (no copy).")
      .def(
          "params",
          [](py::object self) {
            py::dict d;
            auto lock = self.cast<PySession&>().lock();
            for (const auto& n : self.cast<PySession&>().s.param_names())
              d[py::str(n)] = param_view(self, n);
            return d;
          },
          "Every parameter as a numpy view, by name.")
      .def(
          "get_param",
          [](PySession& ps, const std::string& n) {
            auto lock = ps.lock();
            std::vector<int64_t> shape = ps.s.param_shape(n);
            std::vector<float> data = ps.s.get_param(n);
            py::array_t<float> a(std::vector<py::ssize_t>(shape.begin(), shape.end()));
            std::copy(data.begin(), data.end(), a.mutable_data());
            return a;
          },
          py::arg("name"), "A copy of the parameter.")
      .def(
          "freeze",
          [](PySession& ps, const std::string& n, bool frozen) {
            auto lock = ps.lock();
            ps.s.freeze(n, frozen);
          },
          py::arg("name"), py::arg("frozen") = true,
          "Keep a parameter fixed (frozen=False: trainable again): steps drop its gradient.")
      .def(
          "frozen",
          [](PySession& ps, const std::string& n) {
            auto lock = ps.lock();
            return ps.s.frozen(n);
          },
          py::arg("name"))
      .def(
          "set_param",
          [](PySession& ps, const std::string& n,
             py::array_t<float, py::array::c_style | py::array::forcecast> a) {
            auto lock = ps.lock();
            std::vector<int64_t> shape = ps.s.param_shape(n);
            int64_t numel = 1;
            for (int64_t d : shape)
              numel *= d;
            if (a.size() != numel)
              throw Error("parameter " + n + " has " + std::to_string(numel) + " elements, got " +
                          std::to_string(a.size()));
            // In place: numpy views of the parameter stay valid and see the new values.
            std::copy(a.data(), a.data() + a.size(), ps.s.param_data(n));
          },
          py::arg("name"), py::arg("value"))
      .def(
          "save",
          [](PySession& ps, const std::string& path, const std::vector<std::string>& vocab) {
            auto lock = ps.lock();
            ps.s.save(path, vocab);
          },
          py::arg("path"), py::arg("vocab") = std::vector<std::string>{},
          "Parameters, optimizer state and a vocabulary in pejit's checkpoint format.")
      .def(
          "load",
          [](PySession& ps, const std::string& path) {
            auto lock = ps.lock();
            return ps.s.load(path);
          },
          py::arg("path"),
          "Loads a checkpoint (save() or `pejit train --save`); returns its vocabulary. "
          "Existing numpy views of the parameters no longer see the session's storage.")
      .def("rank", [](PySession& ps) { return ps.s.rank(); },
           "This process's rank in its data-parallel job (0 when not distributed).")
      .def("ranks", [](PySession& ps) { return ps.s.ranks(); },
           "The data-parallel job's number of ranks (1 when not distributed).")
      .def("slice", [](PySession& ps, size_t n) { return ps.s.slice(n); }, py::arg("n"),
           "(first, end): the part of a global batch of n items this rank steps on.")
      .def(
          "gather_ranks",
          [](PySession& ps, const std::vector<double>& values) {
            auto lock = ps.lock();
            return ps.s.gather_ranks(values);
          },
          py::arg("values"),
          "Every rank's values, in rank order (a collective: every rank calls it).")
      .def(
          "check_replicas",
          [](PySession& ps) {
            auto lock = ps.lock();
            ps.s.check_replicas();
          },
          "Checks that every rank holds bitwise the same parameters (a collective).")
      .def("stats", &stats_dict,
           "Batches and seconds per path, plan cache hits and misses, per-entry counters, and "
           "what the last add_source re-specialized and reused.")
      .def("kernels", [](PySession& ps) {
        auto lock = ps.lock();
        py::list out;
        for (const auto& k : ps.s.kernels()) {
          py::dict d;
          d["signature"] = k.signature;
          d["schedule"] = k.schedule;
          d["schedule_source"] = k.schedule_source;
          d["ir_hash"] = k.ir_hash;
          d["compile_ms"] = k.compile_ms;
          d["cached"] = k.cached;
          out.append(d);
        }
        return out;
      });

  bind_data(m);
  m.def("keep_freed_memory", &keep_freed_memory,
        "Tunes malloc for a training loop, as the pejit command does (once, at start).");
}

} // namespace pejit::python
