// pejit::ScheduleDB: loads a tuned database through jit::ScheduleDB and keeps it shared, so
// that copies of the options (and every engine given them) hold the same immutable database.
#include "runtime/schedule_api.h"

#include "jit/jit.h"

namespace pejit {

ScheduleDB::ScheduleDB(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

ScheduleDB ScheduleDB::load(const std::string& path) {
  auto db = std::make_shared<const jit::ScheduleDB>(jit::ScheduleDB::load(path));
  std::string warning = db->cpu_warning(jit::Jit::host_cpu());
  return ScheduleDB(std::make_shared<const Impl>(Impl{std::move(db), std::move(warning)}));
}

const std::string& ScheduleDB::path() const {
  return impl_->db->path();
}

size_t ScheduleDB::size() const {
  return impl_->db->size();
}

std::string ScheduleDB::warning() const {
  return impl_->warning;
}

const ScheduleDB::Impl& ScheduleDB::impl() const {
  return *impl_;
}

} // namespace pejit
