// A hierarchical hashed timer wheel (pure logic; time is passed in).
//
// Four levels of 256 slots; level k's slots are 256^k ticks wide, so the
// wheel spans 2^32 ticks (49 days at 1 ms per tick; later deadlines are
// parked in the top level and re-filed when they come round). Schedule and
// Cancel are O(1): a timer is put in the slot of the lowest level whose
// current window contains its deadline, in an intrusive list, and an id ->
// node map finds it for Cancel. Advance() moves time forward, cascading a
// higher-level slot down when time enters it and firing the level-0 slot of
// each tick, skipping empty stretches instead of visiting every tick.
// NextWakeup() tells a driving thread when to wake next: exactly the next
// deadline if it is in level 0, else the start of the next non-empty
// higher-level slot (where timers cascade down and the answer sharpens), so
// the thread sleeps until something can be due instead of ticking.
//
// Not thread-safe: TimerThread (timer_thread.h) wraps it with a mutex and a
// thread.

#ifndef RELOCK_LIB_TIMER_TIMER_WHEEL_H_
#define RELOCK_LIB_TIMER_TIMER_WHEEL_H_

#include <bitset>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/types/optional.h"

namespace relock {
namespace timer {

using Tick = int64_t;
using TimerId = uint64_t;  // never 0
using TimerCallback = std::function<void()>;

class TimerWheel {
 public:
  static constexpr int kLevels = 4;
  static constexpr int kSlotBits = 8;
  static constexpr int kSlots = 1 << kSlotBits;

  // `now`: the current tick; timers due at or before it fire on the next
  // Advance().
  explicit TimerWheel(Tick now);
  ~TimerWheel();
  TimerWheel(const TimerWheel&) = delete;
  TimerWheel& operator=(const TimerWheel&) = delete;

  // Files `callback` to fire at `deadline` (a past deadline fires on the next
  // Advance()). O(1).
  TimerId Schedule(Tick deadline, TimerCallback callback);
  // Removes a pending timer; false if it already fired, was cancelled or
  // never existed. O(1).
  bool Cancel(TimerId id);

  // Moves time to `now` (never backwards) and appends the callbacks of every
  // timer due at or before it to `due`, in deadline order across ticks.
  void Advance(Tick now, std::vector<TimerCallback>* due);

  // Removes every pending timer, appending its callback to `dropped`.
  void Clear(std::vector<TimerCallback>* dropped);

  // When Advance() may next have something to fire (see the banner); nullopt
  // when no timer is pending. Never earlier than now().
  absl::optional<Tick> NextWakeup() const;

  Tick now() const { return now_; }
  size_t size() const { return nodes_.size(); }

 private:
  struct Node {
    TimerId id;
    Tick deadline;
    TimerCallback callback;
    Node* prev = nullptr;
    Node* next = nullptr;
    int level = kReady;
    int slot = 0;
  };
  struct Level {
    Node* heads[kSlots] = {};
    std::bitset<kSlots> occupied;
  };

  // Pseudo-levels for the two lists outside the wheel.
  static constexpr int kReady = -1;     // deadline <= now_: next Advance()
  static constexpr int kFar = kLevels;  // beyond the top level's window

  static int Shift(int level) { return level * kSlotBits; }
  Node** HeadOf(int level, int slot);
  void File(Node* node);
  void Link(Node* node, int level, int slot);
  void Unlink(Node* node);
  void Cascade(int level);
  // Moves every node of a list to `due` (and out of nodes_).
  void FireList(Node** head, std::vector<TimerCallback>* due);
  // The next tick after now_ (up to `limit`) at which a level-0 slot fires or
  // a higher slot cascades; `limit` if none sooner.
  Tick NextEvent(Tick limit) const;
  // First occupied slot index > `from` in `level`, or kSlots.
  static int NextOccupied(const Level& level, int from);

  Tick now_;
  TimerId next_id_ = 1;
  Level levels_[kLevels];
  Node* ready_ = nullptr;
  Node* far_ = nullptr;
  absl::flat_hash_map<TimerId, std::unique_ptr<Node>> nodes_;
};

}  // namespace timer
}  // namespace relock

#endif  // RELOCK_LIB_TIMER_TIMER_WHEEL_H_
