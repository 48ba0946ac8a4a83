//! Tests of the arena's bookkeeping ([`Bump`]), natively.

use super::*;

/// Serves every chunk request from a fake address space.
fn alloc(bump: &mut Bump, heap: &mut usize, size: usize, align: usize) -> Place {
    loop {
        match bump.place(size, align) {
            Place::NeedChunk(chunk) => {
                bump.add_chunk(Some(*heap), chunk);
                *heap += chunk + 4096;
            }
            place => return place,
        }
    }
}

#[test]
fn small_blocks_are_bumped_aligned_and_disjoint() {
    let mut bump = Bump::new();
    let mut heap = 1 << 20;
    let a = alloc(&mut bump, &mut heap, 3, 1);
    let b = alloc(&mut bump, &mut heap, 8, 8);
    let c = alloc(&mut bump, &mut heap, 1, 1);
    assert_eq!(a, Place::Arena(1 << 20));
    assert_eq!(b, Place::Arena((1 << 20) + 8));
    assert_eq!(c, Place::Arena((1 << 20) + 16));
}

#[test]
fn large_blocks_go_to_the_system_allocator() {
    let mut bump = Bump::new();
    let mut heap = 1 << 20;
    assert_eq!(alloc(&mut bump, &mut heap, LARGE + 1, 8), Place::System);
    assert_eq!(bump.owner(12345, LARGE + 1), Owner::System);
    assert!(!bump.resize_in_place(1 << 20, 8, LARGE + 1));
}

#[test]
fn the_most_recent_block_is_taken_back_and_resized_in_place() {
    let mut bump = Bump::new();
    let mut heap = 1 << 20;
    let Place::Arena(a) = alloc(&mut bump, &mut heap, 16, 8) else {
        panic!("not in the arena")
    };
    let Place::Arena(b) = alloc(&mut bump, &mut heap, 16, 8) else {
        panic!("not in the arena")
    };
    // `a` is not the most recent: it can shrink in place but not grow.
    assert!(bump.resize_in_place(a, 16, 8));
    assert!(!bump.resize_in_place(a, 16, 32));
    // `b` is: it grows in place, and freeing it rewinds.
    assert!(bump.resize_in_place(b, 16, 64));
    bump.free(b, 64);
    assert_eq!(alloc(&mut bump, &mut heap, 4, 4), Place::Arena(b));
    // Freeing a block that is not the most recent changes nothing.
    bump.free(a, 16);
    assert_eq!(alloc(&mut bump, &mut heap, 4, 4), Place::Arena(b + 4));
}

#[test]
fn the_budget_bounds_the_chunks_and_then_small_blocks_go_to_the_system() {
    let mut bump = Bump::new();
    let mut heap = 1 << 20;
    let mut arena_blocks = Vec::new();
    assert_eq!(bump.owner_of_new(8), Owner::Arena);
    loop {
        match alloc(&mut bump, &mut heap, 1000, 8) {
            Place::Arena(address) => arena_blocks.push(address),
            Place::System => break,
            Place::NeedChunk(_) => unreachable!(),
        }
    }
    assert!(bump.taken <= BUDGET, "took {} bytes", bump.taken);
    assert!(bump.taken > BUDGET / 2, "took only {} bytes", bump.taken);
    // Afterwards small blocks stay with the system allocator…
    assert_eq!(alloc(&mut bump, &mut heap, 8, 8), Place::System);
    assert_eq!(bump.owner_of_new(8), Owner::System);
    // …and frees tell arena blocks from system ones by address.
    for &address in &arena_blocks {
        assert_eq!(bump.owner(address, 1000), Owner::Arena);
    }
    assert_eq!(bump.owner(heap + 64, 8), Owner::System);
    assert_eq!(bump.owner(8, 8), Owner::System);
    // Arena blocks never overlap.
    let mut sorted = arena_blocks.clone();
    sorted.sort_unstable();
    assert!(sorted.windows(2).all(|w| w[1] >= w[0] + 1000));
}

#[test]
fn a_chunk_the_system_cannot_give_ends_the_arena() {
    let mut bump = Bump::new();
    assert_eq!(bump.place(8, 8), Place::NeedChunk(FIRST_CHUNK));
    bump.add_chunk(None, FIRST_CHUNK);
    assert_eq!(bump.place(8, 8), Place::System);
    assert_eq!(bump.owner(4096, 8), Owner::System);
}

#[test]
fn a_block_of_an_older_chunk_ending_where_the_current_begins_is_not_latest() {
    let mut bump = Bump::new();
    let base = 1 << 20;
    bump.add_chunk(Some(base), FIRST_CHUNK);
    let last_of_first = base + FIRST_CHUNK - 64;
    assert_eq!(bump.place(LARGE, 16), Place::Arena(base));
    assert_eq!(
        bump.place(FIRST_CHUNK - LARGE - 64, 16),
        Place::Arena(base + LARGE)
    );
    assert_eq!(bump.place(64, 16), Place::Arena(last_of_first));
    // The next chunk starts right where the first ends.
    assert_eq!(bump.place(64, 16), Place::NeedChunk(2 * FIRST_CHUNK));
    bump.add_chunk(Some(base + FIRST_CHUNK), 2 * FIRST_CHUNK);
    bump.free(last_of_first, 64);
    assert!(!bump.resize_in_place(last_of_first, 64, 128));
    assert_eq!(bump.place(8, 8), Place::Arena(base + FIRST_CHUNK));
}

#[test]
fn over_aligned_blocks_fit_in_a_fresh_chunk() {
    let mut bump = Bump::new();
    let mut heap = (1 << 20) + CHUNK_ALIGN;
    let Place::Arena(address) = alloc(&mut bump, &mut heap, 64, 4096) else {
        panic!("not in the arena")
    };
    assert_eq!(address % 4096, 0);
    assert!(address + 64 <= bump.end);
}

#[test]
fn the_region_takes_blocks_of_any_size_outside_the_budget() {
    let mut bump = Bump::new();
    let (start, end) = (1 << 16, 1 << 19);
    bump.add_region(start, end);
    assert!(bump.region_offered());
    // A large block is bumped in the region and owned by the arena.
    assert_eq!(bump.place(LARGE * 4, 16), Place::Arena(start));
    assert_eq!(bump.owner(start, LARGE * 4), Owner::Arena);
    assert_eq!(bump.owner_of_new(LARGE * 2), Owner::Arena);
    // The latest grows in place past `LARGE`, and frees rewind.
    assert!(bump.resize_in_place(start, LARGE * 4, LARGE * 8));
    bump.free(start, LARGE * 8);
    assert_eq!(bump.place(8, 8), Place::Arena(start));
    // A large block that does not fit goes to the system, and does not
    // end the arena.
    assert_eq!(bump.place(end - start, 8), Place::System);
    assert!(!bump.exhausted);
    assert_eq!(bump.taken, 0, "the region is not budget");
    // A small block that does not fit asks for the first chunk.
    assert_eq!(bump.place(24, 8), Place::Arena(start + 8));
    let left = end - start - 32 + 1;
    assert_eq!(bump.place(left, 8), Place::System);
    let mut blocks = Vec::new();
    loop {
        match bump.place(LARGE, 8) {
            Place::Arena(address) => blocks.push(address),
            Place::NeedChunk(size) => {
                assert_eq!(size, FIRST_CHUNK);
                break;
            }
            Place::System => panic!("a small block left the arena"),
        }
    }
    let last = *blocks.last().unwrap();
    bump.add_chunk(Some(1 << 20), FIRST_CHUNK);
    assert_eq!(bump.place(LARGE, 8), Place::Arena(1 << 20));
    // Outside the region large blocks are the system's again, but the
    // region's blocks stay the arena's, by address.
    assert_eq!(bump.owner_of_new(LARGE + 1), Owner::System);
    assert_eq!(bump.place(LARGE + 1, 8), Place::System);
    assert_eq!(bump.owner(start, LARGE * 4), Owner::Arena);
    assert_eq!(bump.owner(1 << 24, LARGE * 4), Owner::System);
    assert!(!bump.resize_in_place(1 << 20, LARGE, LARGE + 1));
    bump.exhausted = true;
    assert_eq!(bump.owner(last, LARGE), Owner::Arena);
    assert_eq!(bump.owner(1 << 24, 8), Owner::System);
}

#[test]
fn a_region_is_offered_once_and_an_empty_one_gives_nothing() {
    let mut bump = Bump::new();
    bump.add_region(4096, 4096);
    assert!(bump.region_offered());
    assert_eq!(bump.place(8, 8), Place::NeedChunk(FIRST_CHUNK));
    // Too late once chunks are in use.
    let mut bump = Bump::new();
    bump.add_chunk(Some(1 << 20), FIRST_CHUNK);
    bump.add_region(4096, 1 << 16);
    assert_eq!(bump.place(8, 8), Place::Arena(1 << 20));
    assert_eq!(bump.owner(4096, LARGE + 1), Owner::System);
}

/// What `Arena::use_fresh_memory` relies on: it gives grown memory as
/// the region only while the arena has taken nothing.
#[test]
fn the_arena_tells_whether_it_has_taken_memory_yet() {
    let mut bump = Bump::new();
    assert!(!bump.has_taken_memory() && !bump.region_offered());
    bump.add_region(1 << 20, (1 << 20) + (256 << 10));
    assert!(bump.has_taken_memory());
    assert_eq!(bump.place(LARGE * 4, 8), Place::Arena(1 << 20));
    let mut bump = Bump::new();
    bump.add_chunk(Some(1 << 20), FIRST_CHUNK);
    assert!(bump.has_taken_memory() && !bump.region_offered());
}
