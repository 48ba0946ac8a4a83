//! The global allocator of a Wasm plugin: a bump arena, with a budget, over
//! chunks taken from the C allocator.
//!
//! Why: every call runs in a fresh instance whose memory is discarded when
//! the call returns, so what a call allocates rarely needs to be reused
//! within the call. `malloc`/`free` in wasi-libc's dlmalloc cost tens of
//! nanoseconds each in Wasm (every loop back-edge also pays an epoch check);
//! a bump is a handful of instructions. What this saves on the `plugin_call`
//! benchmark: docs/benchmarks/plugins.md#a-bump-arena-with-a-budget-in-the-guest-2026-11-22-0500.
//!
//! What keeps it from changing which plugins fit their memory cap:
//!
//! - frees are not ignored outright: the most recent block is handed back
//!   and grown or shrunk in place (serde's temporaries and growing `Vec`s
//!   and `String`s are mostly last);
//! - blocks over [`LARGE`] bytes always go to `malloc`/`free`, so a plugin
//!   that builds and drops big buffers in a loop reuses their memory;
//! - the arena takes at most [`BUDGET`] bytes of chunks. After that (or when
//!   `malloc` cannot give it a chunk, near a small memory cap) every block
//!   goes to `malloc`, so a plugin needs at most `BUDGET` more memory than it
//!   would with `malloc` alone.
//!
//! Chunks come from `malloc` rather than `memory.grow`: on `wasm32-wasip2`
//! wasi-libc's allocator owns the heap after the data segment (the plugin's
//! spare initial memory), and sharing it keeps a reconcile that fits in the
//! initial memory from growing it (each growth is an `mprotect`, undone when
//! the pool resets the slot). On `wasm32-unknown-unknown` the C allocator is
//! Rust's `dlmalloc`, which knows nothing of the initial memory and grows
//! memory for its first block; there the spare initial memory is given to
//! the arena as its first chunk, a *region* that takes blocks of any size
//! and does not count against the budget (it is memory the plugin has
//! anyway).
//!
//! The bookkeeping ([`Bump`]) is safe code over addresses, tested natively;
//! only the `GlobalAlloc` glue (Wasm builds only) touches memory.

/// Blocks above this size bypass the arena.
pub(crate) const LARGE: usize = 16 << 10;
/// The first chunk; each further chunk doubles, up to [`MAX_CHUNK`].
const FIRST_CHUNK: usize = 32 << 10;
const MAX_CHUNK: usize = 256 << 10;
/// The most chunk memory the arena takes in one instance.
pub(crate) const BUDGET: usize = 2 << 20;
/// Enough chunk slots for [`BUDGET`] with the sizes above (32 + 64 + 128 KiB,
/// then 256 KiB chunks).
const MAX_CHUNKS: usize = 3 + (BUDGET >> 18);
/// Chunks are aligned to this; blocks that need more are aligned within.
pub(crate) const CHUNK_ALIGN: usize = 16;

/// Who owns a block: the arena, or the C allocator behind it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Owner {
    Arena,
    System,
}

/// The arena's bookkeeping, in addresses.
#[derive(Debug)]
pub(crate) struct Bump {
    /// The start of the current chunk.
    start: usize,
    /// The next free address in the current chunk (0: no chunk yet).
    next: usize,
    /// The end of the current chunk.
    end: usize,
    /// The size of the next chunk to take.
    next_chunk: usize,
    /// Chunk memory taken so far.
    taken: usize,
    /// Set once the arena takes no more chunks: small blocks then go to the
    /// C allocator too, and frees must find out where a block came from.
    exhausted: bool,
    chunks: [(usize, usize); MAX_CHUNKS],
    chunk_count: usize,
    /// The region (spare initial memory), if one was given: `start..end`.
    region: (usize, usize),
    /// Whether a region was offered (given or not); it is offered once.
    region_offered: bool,
}

/// Where an allocation is to be served.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Place {
    /// This address in the arena.
    Arena(usize),
    /// The arena wants a new chunk of this size, then to be asked again.
    NeedChunk(usize),
    /// The C allocator.
    System,
}

impl Bump {
    pub(crate) const fn new() -> Self {
        Self {
            start: 0,
            next: 0,
            end: 0,
            next_chunk: FIRST_CHUNK,
            taken: 0,
            exhausted: false,
            chunks: [(0, 0); MAX_CHUNKS],
            chunk_count: 0,
            region: (0, 0),
            region_offered: false,
        }
    }

    /// Whether [`Bump::add_region`] was called.
    pub(crate) fn region_offered(&self) -> bool {
        self.region_offered
    }

    /// Whether the arena has taken memory yet (a region or a chunk).
    pub(crate) fn has_taken_memory(&self) -> bool {
        self.next != 0
    }

    /// Gives the arena the free memory `start..end` (aligned to
    /// [`CHUNK_ALIGN`]) as its current chunk. Unlike a chunk it takes blocks
    /// of any size and does not count against the budget. Offered once,
    /// before the first chunk; an empty range gives nothing.
    pub(crate) fn add_region(&mut self, start: usize, end: usize) {
        self.region_offered = true;
        if end <= start || self.next != 0 {
            return;
        }
        self.region = (start, end);
        self.start = start;
        self.next = start;
        self.end = end;
    }

    /// Whether the current chunk is the region.
    #[inline(always)]
    fn in_region(&self) -> bool {
        self.region.1 != 0 && self.start == self.region.0
    }

    /// Whether `ptr` lies in the region.
    #[inline(always)]
    fn region_contains(&self, ptr: usize) -> bool {
        (self.region.0..self.region.1).contains(&ptr)
    }

    /// Where a block of `size` bytes aligned to `align` (a power of two)
    /// goes.
    #[inline(always)]
    pub(crate) fn place(&mut self, size: usize, align: usize) -> Place {
        // The common case, kept small enough to inline into every
        // allocation: room in the current chunk.
        if (size <= LARGE || self.in_region())
            && !self.exhausted
            && self.next != 0
            && let Some(start) = self.next.checked_add(align - 1).map(|a| a & !(align - 1))
            && let Some(end) = start.checked_add(size)
            && end <= self.end
        {
            self.next = end;
            return Place::Arena(start);
        }
        self.place_elsewhere(size, align)
    }

    /// [`Bump::place`] for a block that does not fit the current chunk.
    #[cold]
    #[inline(never)]
    fn place_elsewhere(&mut self, size: usize, align: usize) -> Place {
        // A large block that did not fit the region goes to the C allocator
        // too: chunks are for small blocks.
        if size > LARGE || self.exhausted {
            return Place::System;
        }
        // A block aligned beyond a chunk's alignment may need up to
        // `align - CHUNK_ALIGN` bytes of padding at the start of a chunk.
        let padding = align.saturating_sub(CHUNK_ALIGN);
        if self.taken + self.next_chunk > BUDGET
            || self.chunk_count == MAX_CHUNKS
            || size + padding > self.next_chunk
        {
            self.exhausted = true;
            return Place::System;
        }
        Place::NeedChunk(self.next_chunk)
    }

    /// A chunk of `size` bytes at `base` (aligned to [`CHUNK_ALIGN`]), or
    /// `None` when the C allocator had none: the arena then stops taking
    /// chunks.
    pub(crate) fn add_chunk(&mut self, chunk: Option<usize>, size: usize) {
        let Some(base) = chunk else {
            self.exhausted = true;
            return;
        };
        // What is left of the previous chunk is abandoned: less than the
        // block that did not fit, at most `LARGE` bytes.
        self.start = base;
        self.next = base;
        self.end = base + size;
        self.taken += size;
        self.chunks[self.chunk_count] = (base, base + size);
        self.chunk_count += 1;
        self.next_chunk = (size * 2).min(MAX_CHUNK);
    }

    /// Who owns the block of `size` bytes at `ptr`.
    #[inline(always)]
    pub(crate) fn owner(&self, ptr: usize, size: usize) -> Owner {
        if size > LARGE {
            if self.region_contains(ptr) {
                Owner::Arena
            } else {
                Owner::System
            }
        } else if !self.exhausted {
            // Until the arena is exhausted every small block is the arena's.
            Owner::Arena
        } else {
            self.owner_by_address(ptr)
        }
    }

    #[cold]
    fn owner_by_address(&self, ptr: usize) -> Owner {
        let in_arena = self.region_contains(ptr)
            || self.chunks[..self.chunk_count]
                .iter()
                .any(|&(start, end)| (start..end).contains(&ptr));
        if in_arena {
            Owner::Arena
        } else {
            Owner::System
        }
    }

    /// Who would own a new block of `size` bytes.
    pub(crate) fn owner_of_new(&self, size: usize) -> Owner {
        if (size > LARGE && !self.in_region()) || self.exhausted {
            Owner::System
        } else {
            Owner::Arena
        }
    }

    /// Whether the arena block of `size` bytes at `ptr` is the most recent
    /// one. It must lie in the current chunk: a block of an older chunk may
    /// end where the current one begins.
    #[inline(always)]
    fn is_latest(&self, ptr: usize, size: usize) -> bool {
        ptr >= self.start && ptr + size == self.next
    }

    /// Frees an arena block: only the most recent one is taken back.
    #[inline(always)]
    pub(crate) fn free(&mut self, ptr: usize, size: usize) {
        if self.is_latest(ptr, size) {
            self.next = ptr;
        }
    }

    /// Resizes an arena block in place if it can: it is the most recent one
    /// and the new size fits the chunk, or it shrinks. A block never grows
    /// past [`LARGE`] outside the region (its owner is told by its size).
    pub(crate) fn resize_in_place(&mut self, ptr: usize, old: usize, new: usize) -> bool {
        if new > LARGE && !self.region_contains(ptr) {
            return false;
        }
        if self.is_latest(ptr, old) && ptr + new <= self.end {
            self.next = ptr + new;
            return true;
        }
        new <= old
    }
}

#[cfg(target_arch = "wasm32")]
pub(crate) use glue::Arena;

#[cfg(target_arch = "wasm32")]
#[allow(unsafe_code)]
mod glue {
    use super::{Bump, CHUNK_ALIGN, Owner, Place};
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::cell::UnsafeCell;

    /// A Wasm page.
    const PAGE: usize = 64 << 10;

    /// The `#[global_allocator]` of SDK plugins built for Wasm.
    pub(crate) struct Arena(UnsafeCell<Bump>);

    // SAFETY: Wasm plugins are single-threaded.
    unsafe impl Sync for Arena {}

    impl Arena {
        pub(crate) const fn new() -> Self {
            Self(UnsafeCell::new(Bump::new()))
        }

        /// Serves this instance's allocations from `bytes` of memory grown
        /// for the purpose, past the initial memory, instead of the initial
        /// memory's spare part (or, with WASI, the C allocator's heap
        /// there). For a call that is not a reconcile: the `manifest` call
        /// builds its definitions in tens of KiB, and the host's pool
        /// resets every page a call ever wrote in a slot on every later
        /// call in that slot, which made each 1 KiB reconcile after it
        /// slower (docs/benchmarks/plugins.md#current-figures-the-manifest-kept-out-of-the-reconciles-memory-2026-11-22-1140). Pages past the initial memory are outside what later
        /// instances can reach, so they cost the reconciles nothing.
        ///
        /// Does nothing once something was allocated, or if the memory
        /// cannot grow (a small cap): allocation then goes on as usual.
        pub(crate) fn use_fresh_memory(&self, bytes: usize) {
            let bump = self.bump();
            if bump.region_offered() || bump.has_taken_memory() {
                return;
            }
            let pages = bytes.div_ceil(PAGE);
            let old = core::arch::wasm32::memory_grow(0, pages);
            if old == usize::MAX {
                return;
            }
            bump.add_region(old * PAGE, (old + pages) * PAGE);
        }

        /// `alloc` when the current chunk has no room: a new chunk, or
        /// the C allocator.
        ///
        /// # Safety
        ///
        /// `GlobalAlloc::alloc`'s contract.
        #[cold]
        #[inline(never)]
        unsafe fn alloc_elsewhere(&self, layout: Layout) -> *mut u8 {
            let bump = self.bump();
            #[cfg(target_os = "unknown")]
            if !bump.region_offered() {
                let (start, end) = spare_initial_memory();
                bump.add_region(start, end);
            }
            loop {
                match bump.place(layout.size(), layout.align()) {
                    Place::Arena(address) => return address as *mut u8,
                    // SAFETY: forwarded contract.
                    Place::System => return unsafe { System.alloc(layout) },
                    Place::NeedChunk(size) => {
                        // SAFETY: non-zero size, valid power-of-two alignment.
                        let base = unsafe {
                            System.alloc(Layout::from_size_align_unchecked(size, CHUNK_ALIGN))
                        };
                        bump.add_chunk((!base.is_null()).then_some(base as usize), size);
                    }
                }
            }
        }

        /// The bookkeeping. Single-threaded, and no caller keeps the
        /// reference beyond one allocator call, so it is never aliased.
        #[allow(clippy::mut_from_ref)]
        fn bump(&self) -> &mut Bump {
            // SAFETY: see above.
            unsafe { &mut *self.0.get() }
        }
    }

    /// The memory between the end of the data segment and the end of the
    /// linear memory, which nothing else uses on `wasm32-unknown-unknown`
    /// (Rust's `dlmalloc` takes its memory from `memory.grow`).
    #[cfg(target_os = "unknown")]
    fn spare_initial_memory() -> (usize, usize) {
        unsafe extern "C" {
            /// Where the linker put the end of the data (and stack).
            static __heap_base: u8;
        }
        let start = (&raw const __heap_base as usize).next_multiple_of(CHUNK_ALIGN);
        let end = core::arch::wasm32::memory_size(0) * 65536;
        (start, end)
    }

    // SAFETY: arena blocks are disjoint ranges of chunks (and of the
    // region) that stay allocated for the life of the instance; every other block comes from
    // and returns to `System`, as `Bump::owner` tells.
    unsafe impl GlobalAlloc for Arena {
        #[inline]
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            if let Place::Arena(address) = self.bump().place(layout.size(), layout.align()) {
                return address as *mut u8;
            }
            // SAFETY: forwarded contract.
            unsafe { self.alloc_elsewhere(layout) }
        }

        #[inline]
        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            let bump = self.bump();
            match bump.owner(ptr as usize, layout.size()) {
                Owner::Arena => bump.free(ptr as usize, layout.size()),
                // SAFETY: `owner` says `System` allocated it, with `layout`.
                Owner::System => unsafe { System.dealloc(ptr, layout) },
            }
        }

        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            let bump = self.bump();
            let old = layout.size();
            let owner = bump.owner(ptr as usize, old);
            if owner == Owner::Arena && bump.resize_in_place(ptr as usize, old, new_size) {
                return ptr;
            }
            // SAFETY: `new_size` is non-zero and, rounded up to the
            // alignment, does not overflow (`GlobalAlloc::realloc`'s contract).
            let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
            if owner == Owner::System && bump.owner_of_new(new_size) == Owner::System {
                // Stays with `System`, which may grow it in place.
                // SAFETY: forwarded contract.
                return unsafe { System.realloc(ptr, layout, new_size) };
            }
            // SAFETY: forwarded contract.
            let new = unsafe { self.alloc(new_layout) };
            if !new.is_null() {
                // SAFETY: both blocks are valid for `min(old, new_size)`
                // bytes and do not overlap (the old one is still allocated).
                unsafe {
                    std::ptr::copy_nonoverlapping(ptr, new, old.min(new_size));
                    self.dealloc(ptr, layout);
                }
            }
            new
        }
    }
}

#[cfg(test)]
mod tests;
