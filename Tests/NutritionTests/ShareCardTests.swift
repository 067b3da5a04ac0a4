import NIOPosix
import Testing

@testable import Nutrition

@Suite struct ShareCardTests {
    static let meal = ShareCard.Content(
        mealName: "Crème brûlée & café", calories: 640, proteinG: 12.5, carbsG: 80, fatG: 30, score: 92, band: "great", appName: "Foodwise")

    @Test func drawsA1200By630PNG() throws {
        let png = try ShareCard.png(Self.meal)
        let size = try pngSize(png)
        #expect(size.width == 1200 && size.height == 630)
        #expect(size.width == ShareCard.width && size.height == ShareCard.height)
        // A whole stream, not one cut short: it ends with the IEND chunk (length 0, "IEND", CRC).
        let iend: [UInt8] = [0, 0, 0, 0, 0x49, 0x45, 0x4E, 0x44, 0xAE, 0x42, 0x60, 0x82]
        #expect(Array(png.suffix(12)) == iend)
    }

    @Test(arguments: [
        String(repeating: "Crème brûlée & café au lait with caramelised pecans ", count: 20),
        "Supercalifragilisticexpialidociouspancakeswithmaplesyrupandbaconandeggs",
        "日本語のラーメンと餃子 🍜🥟 Ωμέγα салат שקשוקה",
        "Two\nlines\tand a tab",
        "",
    ])
    func drawsAnyName(_ name: String) throws {
        var content = Self.meal
        content.mealName = name
        content.appName = name
        let size = try pngSize(try ShareCard.png(content))
        #expect(size.width == 1200 && size.height == 630)
    }

    /// Amounts a bug upstream could pass: drawn clamped, never a failure.
    @Test func drawsOutOfRangeNumbers() throws {
        let content = ShareCard.Content(
            mealName: "Soup", calories: .nan, proteinG: -4, carbsG: .infinity, fatG: 1e300, score: 250, band: "", appName: "Foodwise")
        let size = try pngSize(try ShareCard.png(content))
        #expect(size.width == 1200 && size.height == 630)
        var negative = content
        negative.score = -5
        negative.band = "unknown band"
        _ = try ShareCard.png(negative)
    }

    @Test func scoreAndBandChangeTheImage() throws {
        var poor = Self.meal
        poor.score = 31
        poor.band = "poor"
        var sameBand = Self.meal
        sameBand.score = 80
        let great = try ShareCard.png(Self.meal)
        let poorCard = try ShareCard.png(poor)
        let sameBandCard = try ShareCard.png(sameBand)
        #expect(great != poorCard)
        #expect(great != sameBandCard)
    }

    /// Unhinted text and no timestamp in the PNG: the same card is the same bytes (an ETag can be
    /// its hash).
    @Test func sameContentSameBytes() throws {
        let first = try ShareCard.png(Self.meal)
        let second = try ShareCard.png(Self.meal)
        #expect(first == second)
    }

    /// Several cards at once on the thread pool: each draws on its own surface, and equal content
    /// still gives equal bytes.
    @Test func rendersConcurrentlyOnThreadPool() async throws {
        let expected = try ShareCard.png(Self.meal)
        let cards = try await withThrowingTaskGroup(of: (Int, [UInt8]).self) { group in
            for index in 0..<8 {
                group.addTask {
                    var content = Self.meal
                    content.score = index.isMultiple(of: 2) ? Self.meal.score : index * 10
                    return (index, try await ShareCard.render(content, on: .singleton))
                }
            }
            return try await group.reduce(into: [Int: [UInt8]]()) { $0[$1.0] = $1.1 }
        }
        #expect(cards.count == 8)
        for (index, png) in cards {
            let size = try pngSize(png)
            #expect(size.width == 1200 && size.height == 630)
            if index.isMultiple(of: 2) { #expect(png == expected) } else { #expect(png != expected) }
        }
    }

    /// Reads the size from the PNG's signature and first chunk, IHDR: its length (13), its type, then
    /// width and height as big-endian 32-bit integers.
    private func pngSize(_ png: [UInt8]) throws -> (width: Int, height: Int) {
        try #require(png.count > 33)
        let signature: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]
        let ihdrHeader: [UInt8] = [0, 0, 0, 13, 0x49, 0x48, 0x44, 0x52]  // length 13, "IHDR"
        #expect(Array(png.prefix(8)) == signature)
        #expect(Array(png[8..<16]) == ihdrHeader)
        func bigEndian(at offset: Int) -> Int { png[offset..<offset + 4].reduce(0) { $0 << 8 | Int($1) } }
        return (bigEndian(at: 16), bigEndian(at: 20))
    }
}
