#include "runtime/state/sharded_tensors.h"

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace px {

nlohmann::json shard_run_json(const parallel::ShardRun& run) {
  nlohmann::json pieces = nlohmann::json::array();
  for (const parallel::ShardPiece& p : run.pieces)
    pieces.push_back({{"global_offset", p.global_offset}, {"local_offset", p.local_offset}, {"extent", p.extent}});
  return {{"global", run.global.dims()}, {"local", run.local.dims()}, {"pieces", pieces},
          {"begin", run.begin},          {"end", run.end}};
}

parallel::ShardRun shard_run_from_json(const std::string& text, const std::string& name, const std::string& path) {
  auto bad = [&](const std::string& why) -> parallel::ShardRun {
    fail("checkpoint shard file '{}': tensor '{}' has box metadata {}: {}", path, name, text.substr(0, 200), why);
  };
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    parallel::ShardRun run;
    run.global = Shape(j.at("global").get<std::vector<int64_t>>());
    run.local = Shape(j.at("local").get<std::vector<int64_t>>());
    for (const nlohmann::json& p : j.at("pieces"))
      run.pieces.push_back({p.at("global_offset").get<std::vector<int64_t>>(),
                            p.at("local_offset").get<std::vector<int64_t>>(),
                            p.at("extent").get<std::vector<int64_t>>()});
    run.begin = j.at("begin").get<int64_t>();
    run.end = j.at("end").get<int64_t>();
    const std::string problem = run.problem();
    if (!problem.empty()) return bad(problem);
    return run;
  } catch (const nlohmann::json::exception& e) {
    return bad(fmt::format("expected global, local, pieces, begin and end ({})", e.what()));
  }
}

namespace {

// The global index of element `i` of run `run`, for error messages.
std::string global_index(const parallel::ShardRun& run, int64_t i) {
  int64_t flat = run.begin + i;
  std::vector<int64_t> local(static_cast<size_t>(run.local.rank()));
  for (int d = run.local.rank() - 1; d >= 0; --d) {
    local[static_cast<size_t>(d)] = flat % run.local[d];
    flat /= run.local[d];
  }
  for (const parallel::ShardPiece& p : run.pieces) {
    std::vector<int64_t> global(local.size());
    bool inside = true;
    for (size_t d = 0; d < local.size(); ++d) {
      inside = inside && local[d] >= p.local_offset[d] && local[d] < p.local_offset[d] + p.extent[d];
      global[d] = p.global_offset[d] + local[d] - p.local_offset[d];
    }
    if (inside) return fmt::format("[{}]", fmt::join(global, ","));
  }
  return fmt::format("local [{}]", fmt::join(local, ","));
}

}  // namespace

void save_shard_file(const std::string& path, const std::vector<SavedRun>& runs,
                     const std::map<std::string, std::string>& who) {
  std::map<std::string, std::string> metadata = who;
  NamedTensors tensors;
  for (const SavedRun& r : runs) {
    const std::string problem = r.run.problem();
    PX_CHECK(problem.empty(), "shard run '{}': {}", r.name, problem);
    PX_CHECK_EQ(r.values.numel(), r.run.count());
    PX_CHECK(r.values.dtype() == DType::f32, "shard run '{}' is not float32", r.name);
    if (metadata.count(r.name) > 0) fail("shard file '{}': tensor '{}' is saved twice", path, r.name);
    metadata[r.name] = shard_run_json(r.run).dump();
    tensors.emplace_back(r.name, r.values.reshape(Shape{r.run.count()}));
  }
  save_safetensors(path, tensors, metadata);
}

ShardedTensors::ShardedTensors(const std::vector<std::string>& files, std::string what) : what_(std::move(what)) {
  for (const std::string& path : files) {
    readers_.emplace_back(path);
    const SafetensorsReader& reader = readers_.back();
    for (const SafetensorsReader::Entry& e : reader.entries()) {
      auto meta = reader.metadata().find(e.name);
      if (meta == reader.metadata().end())
        fail("checkpoint shard file '{}': tensor '{}' has no box in the metadata (not a parallax shard file?)", path,
             e.name);
      parallel::ShardRun run = shard_run_from_json(meta->second, e.name, path);
      if (e.dtype != DType::f32 || e.shape != Shape{run.count()})
        fail("checkpoint shard file '{}': tensor '{}' is {} {}, its box needs F32 [{}]", path, e.name,
             dtype_name(e.dtype), e.shape, run.count());
      add(e.name, std::move(run), readers_.size() - 1, false, path);
    }
  }
}

ShardedTensors::ShardedTensors(const std::vector<SavedRun>& runs, std::string what) : what_(std::move(what)) {
  for (const SavedRun& r : runs) {
    PX_CHECK_EQ(r.values.numel(), r.run.count());
    held_.push_back(r.values.reshape(Shape{r.run.count()}));
    add(r.name, r.run, held_.size() - 1, true, "memory");
  }
}

void ShardedTensors::add(const std::string& name, parallel::ShardRun run, size_t index, bool in_memory,
                         const std::string& where) {
  std::vector<Located>& saved = runs_[name];
  if (!saved.empty() && saved.front().run.global != run.global)
    fail("checkpoint '{}': tensor '{}' has global shape {} in '{}' but {} elsewhere", what_, name, run.global, where,
         saved.front().run.global);
  saved.push_back({index, std::move(run), in_memory});
}

const Shape& ShardedTensors::global_shape(const std::string& name) const {
  auto it = runs_.find(name);
  if (it == runs_.end()) fail("checkpoint '{}' has no tensor '{}'", what_, name);
  return it->second.front().run.global;
}

Tensor ShardedTensors::read(const std::string& name, const parallel::ShardRun& want) const {
  const Shape& saved_shape = global_shape(name);
  if (saved_shape != want.global)
    fail("checkpoint '{}': tensor '{}' has shape {}, the model expects {}", what_, name, saved_shape, want.global);
  Tensor out = Tensor::empty(Shape{want.count()}, DType::f32);
  std::vector<uint8_t> written(static_cast<size_t>(want.count()), 0);
  for (const Located& saved : runs_.at(name)) {
    if (!parallel::boxes_meet(saved.run, want)) continue;
    const Tensor values = saved.in_memory ? held_[saved.file] : readers_[saved.file].read(name);
    parallel::copy_overlap(saved.run, values.raw(), want, out.raw(), sizeof(float), &written);
  }
  for (size_t i = 0; i < written.size(); ++i)
    if (written[i] == 0)
      fail("checkpoint '{}': no shard file holds element {} of tensor '{}' (shape {}); a shard file is missing", what_,
           global_index(want, static_cast<int64_t>(i)), name, want.global);
  return out;
}

}  // namespace px
