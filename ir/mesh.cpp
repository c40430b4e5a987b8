// Mesh construction and validation; see mesh.h.
#include "ir/mesh.h"

#include <charconv>

namespace sharc {

Mesh::Mesh(std::vector<std::pair<std::string, int>> axes, int num_devices, SrcLoc loc) {
  int rest = -1;
  long known = 1;
  for (size_t i = 0; i < axes.size(); ++i) {
    auto& [name, size] = axes[i];
    if (name.empty()) user_error(loc, "mesh axis " + std::to_string(i) + " has an empty name");
    for (size_t j = 0; j < i; ++j)
      if (axes[j].first == name) user_error(loc, "duplicate mesh axis name: \"" + name + "\"");
    if (size == -1) {
      if (rest >= 0)
        user_error(loc, "mesh axes \"" + axes[rest].first + "\" and \"" + name +
                            "\" are both -1; at most one axis may be \"the rest\"");
      rest = static_cast<int>(i);
    } else if (size <= 0) {
      user_error(loc, "mesh axis \"" + name + "\" has size " + std::to_string(size) +
                          "; sizes must be positive (or -1 for the rest)");
    } else {
      known *= size;
    }
  }
  if (rest >= 0) {
    if (num_devices <= 0)
      user_error(loc, "mesh axis \"" + axes[rest].first +
                          "\" is -1 but the device count is not known");
    if (num_devices % known != 0)
      user_error(loc, "mesh axis \"" + axes[rest].first + "\" is -1 but " +
                          std::to_string(num_devices) + " devices do not divide by " +
                          std::to_string(known) + " (the product of the other axes)");
    axes[rest].second = static_cast<int>(num_devices / known);
    known = num_devices;
  }
  for (auto& [name, size] : axes) axes_.push_back({name, size});
  if (num_devices > 0 && known != num_devices)
    user_error(loc, "mesh " + str() + " has " + std::to_string(known) + " devices but " +
                        std::to_string(num_devices) + " devices were given");
}

Mesh Mesh::parse(std::string_view text, int num_devices, SrcLoc loc) {
  std::vector<std::pair<std::string, int>> axes;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    if (comma == std::string_view::npos) comma = text.size();
    std::string_view item = text.substr(pos, comma - pos);
    size_t eq = item.find('=');
    int size = 0;
    if (eq == std::string_view::npos ||
        std::from_chars(item.data() + eq + 1, item.data() + item.size(), size).ec != std::errc{})
      user_error(loc, "cannot parse mesh \"" + std::string(text) + "\": expected name=size[,name=size...], got \"" +
                          std::string(item) + "\"");
    axes.emplace_back(std::string(item.substr(0, eq)), size);
    pos = comma + 1;
  }
  return Mesh(std::move(axes), num_devices, loc);
}

int Mesh::num_devices() const {
  int n = 1;
  for (auto& a : axes_) n *= a.size;
  return n;
}

int Mesh::index(std::string_view axis) const {
  for (size_t i = 0; i < axes_.size(); ++i)
    if (axes_[i].name == axis) return static_cast<int>(i);
  return -1;
}

int Mesh::size(std::string_view axis) const {
  int i = index(axis);
  if (i < 0) internal_error("no mesh axis " + std::string(axis) + " in " + str());
  return axes_[i].size;
}

int Mesh::size(const std::vector<std::string>& axes) const {
  int n = 1;
  for (auto& a : axes) n *= size(a);
  return n;
}

std::vector<int> Mesh::coords(int rank) const {
  std::vector<int> c(axes_.size());
  for (int i = static_cast<int>(axes_.size()) - 1; i >= 0; --i) {
    c[i] = rank % axes_[i].size;
    rank /= axes_[i].size;
  }
  return c;
}

std::string Mesh::str() const {
  std::string s = "<[";
  for (size_t i = 0; i < axes_.size(); ++i) {
    if (i) s += ", ";
    s += "\"" + axes_[i].name + "\"=" + std::to_string(axes_[i].size);
  }
  return s + "]>";
}

std::string Mesh::names() const {
  std::string s;
  for (size_t i = 0; i < axes_.size(); ++i) s += (i ? ", '" : "'") + axes_[i].name + "'";
  return s;
}

bool Mesh::operator==(const Mesh& o) const {
  if (axes_.size() != o.axes_.size()) return false;
  for (size_t i = 0; i < axes_.size(); ++i)
    if (axes_[i].name != o.axes_[i].name || axes_[i].size != o.axes_[i].size) return false;
  return true;
}

}  // namespace sharc
