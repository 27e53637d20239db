// The public pejit::ScheduleDB (include/pejit/pejit.h) over jit::ScheduleDB: what the session
// hands its engine.
#pragma once

#include "jit/schedule.h"
#include "pejit/pejit.h"

#include <memory>

namespace pejit {

struct ScheduleDB::Impl {
  std::shared_ptr<const jit::ScheduleDB> db;
  std::string warning; ///< jit::ScheduleDB::cpu_warning for this host's CPU
};

} // namespace pejit
