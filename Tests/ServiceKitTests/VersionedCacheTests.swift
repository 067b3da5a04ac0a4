import ServiceKitCore
import Testing

@Suite struct VersionedCacheTests {
    /// A value comes back only for the version it was made from; a newer one replaces it.
    @Test func aValueIsGivenOnlyForItsVersion() {
        let cache = VersionedCache<String, String>(capacity: 10)
        #expect(cache.value(for: "a", version: 1) == nil)
        cache.store("one", for: "a", version: 1)
        #expect(cache.value(for: "a", version: 1) == "one")
        #expect(cache.value(for: "a", version: 2) == nil, "the data changed since")
        cache.store("two", for: "a", version: 2)
        #expect(cache.value(for: "a", version: 2) == "two" && cache.value(for: "a", version: 1) == nil)
        #expect(cache.count == 1)
    }

    /// At most two generations of `capacity`: what was asked for since the last filling stays, the
    /// rest goes.
    @Test func whatIsNotAskedForGoes() {
        let cache = VersionedCache<Int, Int>(capacity: 2)
        cache.store(10, for: 1, version: 1)
        cache.store(20, for: 2, version: 1)
        cache.store(30, for: 3, version: 1)  // 1 and 2 become the older generation
        #expect(cache.value(for: 1, version: 1) == 10, "moved back to the newer")
        cache.store(40, for: 4, version: 1)  // the newer (3, 1) was full: 2 goes
        #expect(cache.value(for: 2, version: 1) == nil)
        #expect(cache.value(for: 1, version: 1) == 10 && cache.value(for: 3, version: 1) == 30 && cache.value(for: 4, version: 1) == 40)
        #expect(cache.count <= 4)
        for key in 5..<100 { cache.store(key, for: key, version: 1) }
        #expect(cache.count <= 4)
    }

    /// `orMake` makes a value once per version, and every time for data without a version yet.
    @Test func aValueIsMadeOncePerVersion() async {
        let cache = VersionedCache<String, Int>(capacity: 10)
        var made = 0
        func make() async -> Int {
            made += 1
            return made
        }
        #expect(await cache.value(for: "a", version: 1, orMake: make) == 1)
        #expect(await cache.value(for: "a", version: 1, orMake: make) == 1, "kept")
        #expect(await cache.value(for: "a", version: 2, orMake: make) == 2, "made again for a new version")
        #expect(await cache.value(for: "a", version: nil, orMake: make) == 3)
        #expect(await cache.value(for: "a", version: nil, orMake: make) == 4, "nothing kept without a version")
        #expect(made == 4 && cache.value(for: "a", version: 2) == 2)
    }
}
