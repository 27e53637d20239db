// The readers under fuzzing, shared by the seeded fuzz tests in the normal suite
// (tests/runtime/reader_fuzz_test.cpp) and the libFuzzer executables (tests/fuzz/libfuzzer.cpp,
// scripts/fuzz.sh): each target's valid seed inputs, its mutation dictionary, and one input run
// through the reader with the reader's promises checked: it returns or throws pejit::Error
// whose message locates the fault the way the reader's header says it does.
#pragma once

#include "tests/fuzz/mutator.h"

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pejit::fuzz {

enum class Target {
  Trees,      ///< data::parse_trees (bracketed trees): FILE:LINE:COL
  Sentences,  ///< data::read_sentences (one sentence a line): FILE:LINE:COL
  Checkpoint, ///< checkpoint::load: the file, and the tensor for damage inside the data
  Schedules,  ///< jit::ScheduleDB::load: the file, and the entry or JSON line and column
};

inline constexpr Target kTargets[] = {Target::Trees, Target::Sentences, Target::Checkpoint,
                                      Target::Schedules};

/// "trees", "sentences", "checkpoint", "schedules".
const char* target_name(Target t);
std::optional<Target> target_from_name(std::string_view name);

/// Valid inputs (each loads cleanly), the mutations' starting points.
const std::vector<std::string>& seeds(Target t);
const Dictionary& dictionary(Target t);

/// What one input did.
struct Outcome {
  bool accepted = false; ///< the reader returned (else it threw pejit::Error)
  std::string violation; ///< empty, or which promise the reader broke and how
};

/// Runs the target's reader on `input` (written to a scratch file for the readers of files).
/// Never throws: anything other than a result or a located pejit::Error is a violation.
Outcome run_one(Target t, std::string_view input);

} // namespace pejit::fuzz
