// Attributes of a graph node: a small ordered map from name to an int, a
// float, a string, a list of ints or a list of floats (a constant
// block's values: fill_like). Attributes must not encode sizes that
// change when a tensor is split across ranks (use -1 / relative forms), so
// that the same node runs unchanged on a shard.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

namespace px {

using AttrValue = std::variant<int64_t, double, std::string, std::vector<int64_t>, std::vector<double>>;

class Attrs {
 public:
  Attrs() = default;
  Attrs(std::initializer_list<std::pair<const std::string, AttrValue>> items) : items_(items) {}

  bool has(const std::string& name) const { return items_.count(name) != 0; }
  int64_t get_int(const std::string& name) const;
  int64_t get_int(const std::string& name, int64_t fallback) const;
  double get_float(const std::string& name) const;
  double get_float(const std::string& name, double fallback) const;
  const std::string& get_string(const std::string& name) const;
  const std::vector<int64_t>& get_ints(const std::string& name) const;
  const std::vector<double>& get_floats(const std::string& name) const;
  void set(const std::string& name, AttrValue value) { items_[name] = std::move(value); }
  void erase(const std::string& name) { items_.erase(name); }
  std::string str() const;  // "{n_head=4, p=0.1}"

  bool operator==(const Attrs& other) const = default;

 private:
  std::map<std::string, AttrValue> items_;
};

}  // namespace px
