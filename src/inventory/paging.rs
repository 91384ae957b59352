//! How the volume reconciler pages through ListVolumes: when to ask for the next page, when to
//! start again without a limit, and when to stop. A driver's answer decides none of it alone: a
//! token that comes back, a cycle of tokens, pages that never end and a first page cut short
//! with no token all end in a bounded number of calls.

use std::collections::HashSet;

/// The most pages one listing reads: at the default page size, a million volumes.
pub const MAX_PAGES: usize = 10_000;

/// What to ask next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PageStep {
    /// The page after `token`, at most `max_entries` volumes.
    Next { token: String, max_entries: i32 },
    /// Throw away what was read and list again from the start with no limit: the driver's
    /// first page was full and had no next token, as a driver that ignores `max_entries` and
    /// `starting_token` answers (hostpathplugin cuts the list at `max_entries`).
    Whole,
    /// Done; `complete` says whether the listing can be trusted to hold every volume.
    Done { complete: bool },
}

/// The pager's memory of one listing.
#[derive(Debug, Clone)]
pub struct Pager {
    page_size: i32,
    tokens: HashSet<String>,
    pages: usize,
    whole: bool,
}

impl Pager {
    /// A listing `page_size` at a time (0 or less: no limit).
    pub fn new(page_size: i32) -> Self {
        Pager { page_size, tokens: HashSet::new(), pages: 0, whole: false }
    }

    /// The first page to ask for.
    pub fn first(&self) -> PageStep {
        PageStep::Next { token: String::new(), max_entries: self.page_size.max(0) }
    }

    /// Pages read so far.
    pub fn pages(&self) -> usize {
        self.pages
    }

    /// After a page of `returned` volumes whose next token is `next`.
    pub fn after(&mut self, returned: usize, next: &str) -> PageStep {
        self.pages += 1;
        let limited = self.page_size > 0 && !self.whole;
        let full = limited && usize::try_from(self.page_size).is_ok_and(|n| returned >= n);
        if next.is_empty() {
            if full && self.pages == 1 {
                self.whole = true;
                return PageStep::Whole;
            }
            return PageStep::Done { complete: true };
        }
        if self.whole {
            // Asked for everything at once and handed a token: the driver pages after all, but
            // a second listing would start this again; what was read is all there is.
            return PageStep::Done { complete: false };
        }
        // A token seen before (the one just sent, or a cycle) would list the same pages again.
        if !self.tokens.insert(next.to_string()) || self.pages >= MAX_PAGES {
            return PageStep::Done { complete: false };
        }
        PageStep::Next { token: next.to_string(), max_entries: self.page_size.max(0) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn next(token: &str, max: i32) -> PageStep {
        PageStep::Next { token: token.into(), max_entries: max }
    }

    #[test]
    fn each_answer_gives_its_next_step() {
        // (page size, the pages as (volumes returned, next token), the steps after each)
        type Row<'a> = (i32, &'a [(usize, &'a str)], &'a [PageStep]);
        let table: [Row; 7] = [
            (10, &[(3, "")], &[PageStep::Done { complete: true }]),
            (10, &[(10, "a"), (4, "")], &[next("a", 10), PageStep::Done { complete: true }]),
            // A full first page with no token: the driver may not page; ask for everything.
            (10, &[(10, ""), (25, "")], &[PageStep::Whole, PageStep::Done { complete: true }]),
            // The token handed back: stop, not whole.
            (10, &[(10, "a"), (10, "a")], &[next("a", 10), PageStep::Done { complete: false }]),
            // A cycle of two tokens.
            (
                10,
                &[(10, "a"), (10, "b"), (10, "a")],
                &[next("a", 10), next("b", 10), PageStep::Done { complete: false }],
            ),
            // A driver that ignores max_entries but pages.
            (10, &[(50, "a"), (50, "")], &[next("a", 10), PageStep::Done { complete: true }]),
            // No limit asked: a full page means nothing.
            (0, &[(500, "")], &[PageStep::Done { complete: true }]),
        ];
        for (size, pages, steps) in table {
            let mut pager = Pager::new(size);
            let got: Vec<PageStep> = pages.iter().map(|(n, t)| pager.after(*n, t)).collect();
            assert_eq!(got, steps, "page size {size}, pages {pages:?}");
        }
    }

    #[test]
    fn pages_that_never_end_stop_at_the_bound() {
        let mut pager = Pager::new(1);
        let mut steps = 0;
        while let PageStep::Next { .. } = pager.after(1, &format!("t{steps}")) {
            steps += 1;
        }
        assert_eq!(pager.pages(), MAX_PAGES);
        assert_eq!(pager.first(), next("", 1));
    }

    #[test]
    fn a_whole_listing_that_hands_a_token_is_not_trusted() {
        let mut pager = Pager::new(5);
        assert_eq!(pager.after(5, ""), PageStep::Whole);
        assert_eq!(pager.after(5, "x"), PageStep::Done { complete: false });
    }
}
