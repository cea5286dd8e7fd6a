#include "lib/timer/timer_wheel.h"

#include <algorithm>
#include <limits>
#include <utility>

namespace relock {
namespace timer {
namespace {
constexpr Tick kNever = std::numeric_limits<Tick>::max();
}  // namespace

TimerWheel::TimerWheel(Tick now) : now_(now) {}
TimerWheel::~TimerWheel() = default;

TimerWheel::Node** TimerWheel::HeadOf(int level, int slot) {
  if (level == kReady) return &ready_;
  if (level == kFar) return &far_;
  return &levels_[level].heads[slot];
}

void TimerWheel::Link(Node* node, int level, int slot) {
  node->level = level;
  node->slot = slot;
  Node** head = HeadOf(level, slot);
  node->prev = nullptr;
  node->next = *head;
  if (*head != nullptr) (*head)->prev = node;
  *head = node;
  if (level >= 0 && level < kLevels) levels_[level].occupied.set(slot);
}

void TimerWheel::Unlink(Node* node) {
  Node** head = HeadOf(node->level, node->slot);
  if (node->prev != nullptr) {
    node->prev->next = node->next;
  } else {
    *head = node->next;
  }
  if (node->next != nullptr) node->next->prev = node->prev;
  node->prev = node->next = nullptr;
  if (*head == nullptr && node->level >= 0 && node->level < kLevels) {
    levels_[node->level].occupied.reset(node->slot);
  }
}

void TimerWheel::File(Node* node) {
  const Tick d = node->deadline;
  if (d <= now_) {
    Link(node, kReady, 0);
    return;
  }
  for (int k = 0; k < kLevels; ++k) {
    if ((d >> Shift(k + 1)) == (now_ >> Shift(k + 1))) {
      Link(node, k, static_cast<int>((d >> Shift(k)) & (kSlots - 1)));
      return;
    }
  }
  Link(node, kFar, 0);
}

TimerId TimerWheel::Schedule(Tick deadline, TimerCallback callback) {
  auto node = std::make_unique<Node>();
  node->id = next_id_++;
  node->deadline = deadline;
  node->callback = std::move(callback);
  Node* raw = node.get();
  nodes_.emplace(raw->id, std::move(node));
  File(raw);
  return raw->id;
}

bool TimerWheel::Cancel(TimerId id) {
  auto it = nodes_.find(id);
  if (it == nodes_.end()) return false;
  Unlink(it->second.get());
  nodes_.erase(it);
  return true;
}

void TimerWheel::FireList(Node** head, std::vector<TimerCallback>* due) {
  while (*head != nullptr) {
    Node* node = *head;
    Unlink(node);
    auto it = nodes_.find(node->id);
    due->push_back(std::move(node->callback));
    nodes_.erase(it);
  }
}

void TimerWheel::Cascade(int level) {
  const int slot = static_cast<int>((now_ >> Shift(level)) & (kSlots - 1));
  Node** head = HeadOf(level, slot);
  while (*head != nullptr) {
    Node* node = *head;
    Unlink(node);
    File(node);  // lands in a lower level (or ready_)
  }
}

int TimerWheel::NextOccupied(const Level& level, int from) {
  const std::bitset<kSlots>& bits = level.occupied;
  for (int s = from + 1; s < kSlots; ++s) {
    if (bits.test(s)) return s;
  }
  return kSlots;
}

Tick TimerWheel::NextEvent(Tick limit) const {
  Tick best = limit;
  for (int k = 0; k < kLevels; ++k) {
    const int current = static_cast<int>((now_ >> Shift(k)) & (kSlots - 1));
    const int s = NextOccupied(levels_[k], current);
    if (s == kSlots) continue;
    const Tick window = (now_ >> Shift(k + 1)) << Shift(k + 1);
    best = std::min(best, window + (static_cast<Tick>(s) << Shift(k)));
  }
  if (far_ != nullptr) {
    best = std::min(best, ((now_ >> Shift(kLevels)) + 1) << Shift(kLevels));
  }
  return best;
}

void TimerWheel::Advance(Tick now, std::vector<TimerCallback>* due) {
  FireList(&ready_, due);
  while (now_ < now && !nodes_.empty()) {
    now_ = NextEvent(now);
    if ((now_ & ((Tick{1} << Shift(kLevels)) - 1)) == 0) {
      Node* far = far_;
      far_ = nullptr;
      while (far != nullptr) {  // re-file: some now fit in the wheel
        Node* next = far->next;
        far->prev = far->next = nullptr;
        File(far);
        far = next;
      }
    }
    for (int k = kLevels - 1; k >= 1; --k) {
      if ((now_ & ((Tick{1} << Shift(k)) - 1)) == 0) Cascade(k);
    }
    FireList(HeadOf(0, static_cast<int>(now_ & (kSlots - 1))), due);
    FireList(&ready_, due);
  }
  now_ = std::max(now_, now);
}

void TimerWheel::Clear(std::vector<TimerCallback>* dropped) {
  for (auto& [id, node] : nodes_) dropped->push_back(std::move(node->callback));
  nodes_.clear();
  for (Level& level : levels_) {
    std::fill(std::begin(level.heads), std::end(level.heads), nullptr);
    level.occupied.reset();
  }
  ready_ = far_ = nullptr;
}

absl::optional<Tick> TimerWheel::NextWakeup() const {
  if (nodes_.empty()) return absl::nullopt;
  if (ready_ != nullptr) return now_;
  return NextEvent(kNever);
}

}  // namespace timer
}  // namespace relock
