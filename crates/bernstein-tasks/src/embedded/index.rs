//! The in-memory index of the task log: per task only what the store decides on without the full
//! record, and where the full record lies in the log.
//!
//! Per task the index keeps the id, status, role (interned), version, cost, parent, dependencies
//! and the location (offset, length, line) of its current snapshot line. Everything else (title,
//! description, metadata, the unmodelled reference keys) stays in the log and is read back on
//! demand with one `pread` (module `log`). That keeps memory at a few hundred bytes per task
//! whatever the records hold, where a fold of full records costs tens of KiB per task.
//!
//! Two reverse maps make the cascades proportional to what they touch rather than to the
//! project: children by parent id and dependents by dependency id. They may list a task that
//! no longer has that parent or dependency (a foreign writer can rewrite a record), so callers
//! check the current entry; they never miss one, because every snapshot's links are added.
//!
//! The status figures of `bernstein_status` ([`Index::summary`]) are counted as records are
//! applied, so a status call costs the number of roles, not the number of tasks. Costs are the
//! one exception: a sum of floats updated by additions and subtractions drifts from the sum the
//! reference computes in creation order, so when any task carries a cost the sum is recomputed
//! from the index (the store itself never sets one; only foreign records do).

use std::collections::{BTreeMap, HashMap};

use crate::backend::{RoleSummary, STATUS_COST_DECIMALS, StatusSummary};
use crate::lifecycle::TaskStatus;
use crate::model::{Task, TaskId};

/// What a snapshot line contributes to the index.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Meta {
    /// The task id.
    pub(crate) id: TaskId,
    /// Its status.
    pub(crate) status: TaskStatus,
    /// Its version.
    pub(crate) version: u64,
    /// Its role.
    pub(crate) role: String,
    /// Its dependencies.
    pub(crate) depends_on: Vec<TaskId>,
    /// Its parent.
    pub(crate) parent: Option<TaskId>,
    /// Its recorded spend.
    pub(crate) cost_usd: f64,
}

impl Meta {
    /// The index fields of `task`.
    pub(crate) fn of(task: &Task) -> Meta {
        Meta {
            id: task.id.clone(),
            status: task.status,
            version: task.version,
            role: task.role.clone(),
            depends_on: task.depends_on.clone(),
            parent: task.parent_task_id.clone(),
            cost_usd: task.cost_usd,
        }
    }
}

/// Where a snapshot line lies in the current log file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Location {
    /// Byte offset of the line.
    pub(crate) offset: u64,
    /// Its length in bytes, newline included.
    pub(crate) len: u32,
    /// Its 1-based line number, for errors.
    pub(crate) line: u64,
}

#[derive(Debug)]
struct Entry {
    at: Location,
    status: TaskStatus,
    role: u32,
    version: u64,
    cost_usd: f64,
    parent: Option<TaskId>,
    depends_on: Box<[TaskId]>,
}

/// Task counts of one role, kept as records are applied.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct RoleCounts {
    tasks: u64,
    open: u64,
    claimed: u64,
    done: u64,
    failed: u64,
    refused: u64,
}

/// Whether a task's snapshot enters the counts or leaves them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    Enter,
    Leave,
}

impl Change {
    fn apply(self, count: &mut u64) {
        match self {
            Change::Enter => *count += 1,
            Change::Leave => *count = count.saturating_sub(1),
        }
    }
}

impl RoleCounts {
    fn add(&mut self, status: TaskStatus, change: Change) {
        let field = match status {
            TaskStatus::Open => Some(&mut self.open),
            TaskStatus::Claimed => Some(&mut self.claimed),
            TaskStatus::Done => Some(&mut self.done),
            TaskStatus::Failed => Some(&mut self.failed),
            TaskStatus::Refused => Some(&mut self.refused),
            _ => None,
        };
        for count in [Some(&mut self.tasks), field].into_iter().flatten() {
            change.apply(count);
        }
    }
}

/// The index of every task, in creation order (a task's slot is its creation position).
#[derive(Debug, Default)]
pub(crate) struct Index {
    ids: Vec<TaskId>,
    slots: HashMap<TaskId, usize>,
    entries: Vec<Entry>,
    roles: Vec<String>,
    role_slots: HashMap<String, u32>,
    counts: Vec<RoleCounts>,
    /// Tasks in each status, indexed as [`TaskStatus::ALL`] lists the statuses.
    in_status: [u64; TaskStatus::ALL.len()],
    /// Tasks whose cost is positive; while 0 every cost figure is 0 without a sum.
    costed: u64,
    children: HashMap<TaskId, Vec<u32>>,
    dependents: HashMap<TaskId, Vec<u32>>,
}

/// The position of `status` in [`TaskStatus::ALL`].
fn status_position(status: TaskStatus) -> usize {
    TaskStatus::ALL
        .iter()
        .position(|s| *s == status)
        .unwrap_or_default()
}

fn link(map: &mut HashMap<TaskId, Vec<u32>>, key: &TaskId, slot: usize) {
    let slot = u32::try_from(slot).unwrap_or(u32::MAX);
    let list = map.entry(key.clone()).or_default();
    if list.last() != Some(&slot) && !list.contains(&slot) {
        list.push(slot);
    }
}

impl Index {
    fn role_slot(&mut self, role: String) -> u32 {
        if let Some(&slot) = self.role_slots.get(&role) {
            return slot;
        }
        let slot = u32::try_from(self.roles.len()).unwrap_or(u32::MAX);
        self.roles.push(role.clone());
        self.role_slots.insert(role, slot);
        self.counts.push(RoleCounts::default());
        slot
    }

    fn count(&mut self, role: u32, status: TaskStatus, cost_usd: f64, change: Change) {
        if let Some(counts) = self.counts.get_mut(role as usize) {
            counts.add(status, change);
        }
        change.apply(&mut self.in_status[status_position(status)]);
        if cost_usd > 0.0 {
            change.apply(&mut self.costed);
        }
    }

    /// Applies the snapshot `meta` read or written at `at`: the task's entry now describes it.
    pub(crate) fn apply(&mut self, meta: Meta, at: Location) {
        let role = self.role_slot(meta.role);
        let slot = match self.slots.get(&meta.id) {
            Some(&slot) => {
                let old = &self.entries[slot];
                let (old_role, old_status, old_cost) = (old.role, old.status, old.cost_usd);
                self.count(old_role, old_status, old_cost, Change::Leave);
                slot
            }
            None => {
                let slot = self.ids.len();
                self.ids.push(meta.id.clone());
                self.slots.insert(meta.id.clone(), slot);
                self.entries.push(Entry {
                    at,
                    status: meta.status,
                    role,
                    version: meta.version,
                    cost_usd: meta.cost_usd,
                    parent: None,
                    depends_on: Box::default(),
                });
                slot
            }
        };
        if let Some(parent) = &meta.parent {
            link(&mut self.children, parent, slot);
        }
        for dep in &meta.depends_on {
            link(&mut self.dependents, dep, slot);
        }
        self.count(role, meta.status, meta.cost_usd, Change::Enter);
        self.entries[slot] = Entry {
            at,
            status: meta.status,
            role,
            version: meta.version,
            cost_usd: meta.cost_usd,
            parent: meta.parent,
            depends_on: meta.depends_on.into_boxed_slice(),
        };
    }

    /// How many tasks are in one of `statuses`, from the counts kept as records are applied
    /// (no pass over the tasks).
    pub(crate) fn count_in(&self, statuses: &[TaskStatus]) -> u64 {
        statuses
            .iter()
            .map(|status| self.in_status[status_position(*status)])
            .sum()
    }

    /// How many tasks there are.
    pub(crate) fn len(&self) -> usize {
        self.ids.len()
    }

    /// The task ids in creation order.
    pub(crate) fn ids(&self) -> &[TaskId] {
        &self.ids
    }

    /// The creation position of `id`.
    pub(crate) fn slot(&self, id: &TaskId) -> Option<usize> {
        self.slots.get(id).copied()
    }

    /// Whether a task `id` exists.
    pub(crate) fn contains(&self, id: &TaskId) -> bool {
        self.slots.contains_key(id)
    }

    /// Where the current snapshot of the task at `slot` lies.
    pub(crate) fn location(&self, slot: usize) -> Location {
        self.entries[slot].at
    }

    /// Points the task at `slot` to its line in a rewritten log.
    pub(crate) fn relocate(&mut self, slot: usize, at: Location) {
        self.entries[slot].at = at;
    }

    /// The status of the task at `slot`.
    pub(crate) fn status_at(&self, slot: usize) -> TaskStatus {
        self.entries[slot].status
    }

    /// The version of the task at `slot`.
    pub(crate) fn version_at(&self, slot: usize) -> u64 {
        self.entries[slot].version
    }

    /// The status of `id`.
    pub(crate) fn status(&self, id: &TaskId) -> Option<TaskStatus> {
        self.slot(id).map(|slot| self.entries[slot].status)
    }

    /// The parent of `id`.
    pub(crate) fn parent(&self, id: &TaskId) -> Option<&TaskId> {
        self.slot(id)
            .and_then(|slot| self.entries[slot].parent.as_ref())
    }

    /// The dependencies of `id`.
    pub(crate) fn depends_on(&self, id: &TaskId) -> &[TaskId] {
        self.slot(id)
            .map_or(&[][..], |slot| &self.entries[slot].depends_on)
    }

    /// Tasks that named `parent` as their parent in some snapshot, in creation order (a
    /// superset: check the current parent).
    pub(crate) fn children(&self, parent: &TaskId) -> impl Iterator<Item = &TaskId> + '_ {
        self.children
            .get(parent)
            .into_iter()
            .flatten()
            .map(|&slot| &self.ids[slot as usize])
    }

    /// Tasks that listed `dep` among their dependencies in some snapshot (a superset: check the
    /// current dependencies).
    pub(crate) fn dependents(&self, dep: &TaskId) -> impl Iterator<Item = &TaskId> + '_ {
        self.dependents
            .get(dep)
            .into_iter()
            .flatten()
            .map(|&slot| &self.ids[slot as usize])
    }

    /// Whether some snapshot named `id` as a dependency.
    pub(crate) fn is_referenced(&self, id: &TaskId) -> bool {
        self.dependents.contains_key(id)
    }

    /// The `GET /status` figures, from the counts kept as records were applied; the same
    /// figures [`StatusSummary::from_tasks`] folds from every task.
    pub(crate) fn summary(&self) -> StatusSummary {
        let mut summary = StatusSummary::from_tasks(std::iter::empty());
        let mut rows: BTreeMap<&str, RoleSummary> = BTreeMap::new();
        for (role, counts) in self.roles.iter().zip(&self.counts) {
            if counts.tasks == 0 {
                continue;
            }
            summary.total += counts.tasks;
            summary.open += counts.open;
            summary.claimed += counts.claimed;
            summary.done += counts.done;
            summary.failed += counts.failed;
            summary.refused += counts.refused;
            rows.insert(
                role.as_str(),
                RoleSummary {
                    role: role.clone(),
                    open: counts.open,
                    claimed: counts.claimed,
                    done: counts.done,
                    failed: counts.failed,
                    cost_usd: None,
                },
            );
        }
        if self.costed > 0 {
            // Summed in creation order, exactly as the fold over every task sums them.
            let mut per_role: BTreeMap<&str, f64> = BTreeMap::new();
            let mut total = 0.0;
            for entry in self.entries.iter().filter(|e| e.cost_usd > 0.0) {
                let role = self.roles[entry.role as usize].as_str();
                *per_role.entry(role).or_insert(0.0) += entry.cost_usd;
                total += entry.cost_usd;
            }
            for (role, cost) in per_role {
                if let Some(row) = rows.get_mut(role) {
                    row.cost_usd = Some(crate::plan::python_round(cost, STATUS_COST_DECIMALS));
                }
            }
            summary.total_cost_usd = crate::plan::python_round(total, STATUS_COST_DECIMALS);
        }
        summary.per_role = rows.into_values().collect();
        summary
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::model::{NewTask, Task};

    proptest! {
        /// The counts kept as records are applied (per status, and the status summary) equal
        /// the fold over every task's current snapshot, however tasks change status, role and
        /// cost; each task is listed once among a dependency's dependents, however often it
        /// was applied, and a dependency once named stays referenced.
        #[test]
        fn the_kept_counts_agree_with_folding_every_task(
            moves in proptest::collection::vec(
                (0_usize..12, 0_usize..TaskStatus::ALL.len(), 0_usize..3, 0_usize..3, any::<bool>()),
                1..80,
            )
        ) {
            let mut index = Index::default();
            let mut referenced = false;
            let mut order: Vec<usize> = Vec::new();
            let mut tasks: HashMap<usize, Task> = HashMap::new();
            let dep = TaskId::parse("dep").unwrap();
            for (line, (task, status, role, cost, depends)) in moves.into_iter().enumerate() {
                let mut request = NewTask::new("t", "d");
                request.role = ["backend", "qa", "docs"][role].to_owned();
                let id = TaskId::parse(&format!("t-{task}")).unwrap();
                let mut snapshot = Task::new(id, request, 1.0).unwrap();
                snapshot.status = TaskStatus::ALL[status];
                snapshot.cost_usd = [0.0, 0.25, 1.5][cost];
                snapshot.version = line as u64 + 1;
                if depends {
                    snapshot.depends_on = vec![dep.clone()];
                }
                let at = Location { offset: 0, len: 0, line: line as u64 + 1 };
                index.apply(Meta::of(&snapshot), at);
                referenced |= depends;
                if !tasks.contains_key(&task) {
                    order.push(task);
                }
                tasks.insert(task, snapshot);
            }
            for status in TaskStatus::ALL {
                let counted = tasks.values().filter(|t| t.status == status).count() as u64;
                prop_assert_eq!(index.count_in(&[status]), counted, "{:?}", status);
            }
            prop_assert_eq!(index.count_in(&TaskStatus::ALL), tasks.len() as u64);
            let folded = StatusSummary::from_tasks(order.iter().map(|task| &tasks[task]));
            prop_assert_eq!(index.summary(), folded);
            let dependents: Vec<&TaskId> = index.dependents(&dep).collect();
            let distinct: std::collections::HashSet<&&TaskId> = dependents.iter().collect();
            prop_assert_eq!(distinct.len(), dependents.len(), "{:?}", dependents);
            prop_assert_eq!(index.is_referenced(&dep), referenced);
            prop_assert!(!index.is_referenced(&TaskId::parse("t-0").unwrap()));
        }
    }
}
