import CShareCard
import Images
import NIOCore
import NIOPosix

/// A meal's share card: a 1200×630 PNG (the size link previews expect) with the meal's name, its
/// calories and macros, the diet score badge in its band's colour and the app's name, and the meal's
/// photo on the left when it has one. Cairo draws
/// it and Pango lays out the text (wrapping, ellipsising, any UTF-8), both inside `CShareCard`'s C,
/// so Swift makes one call and copies the bytes.
enum ShareCard {
    static let width = Int(SHARE_CARD_WIDTH)
    static let height = Int(SHARE_CARD_HEIGHT)

    struct Content: Sendable, Equatable {
        var mealName: String
        var calories: Double
        var proteinG: Double
        var carbsG: Double
        var fatG: Double
        /// 0...100; drawn clamped.
        var score: Int
        /// "great" (green), "ok" (amber) or "poor" (red); drawn as given, grey when none of these.
        var band: String
        var appName: String
        /// The meal's photo as stored (a JPEG this service wrote), cropped around its centre to
        /// fill the card's photo space.
        var photo: ByteBuffer? = nil
    }

    /// Drawing and PNG encoding take tens of milliseconds of CPU: on a thread pool, off the event
    /// loop (as avatars and bcrypt). The pool's threads, one per core by default, also bound how many
    /// cards are drawn at once.
    static func render(_ content: Content, on pool: NIOThreadPool = .singleton) async throws -> [UInt8] {
        try await pool.runIfActive { try png(content) }
    }

    /// Blocking; safe to call from several threads at once (each call draws on its own surface).
    static func png(_ content: Content) throws(ShareCardError) -> [UInt8] {
        var output: UnsafeMutablePointer<UInt8>? = nil
        var length = 0
        // A photo libvips cannot read again (it wrote it) draws the card without it.
        let photo = content.photo.flatMap { try? CleanImage.coverPNG($0, width: Int(SHARE_CARD_PHOTO_WIDTH), height: Int(SHARE_CARD_PHOTO_HEIGHT)) } ?? []
        let status = content.mealName.withCString { title in
            content.appName.withCString { appName in
                content.band.withCString { band in
                    photo.withUnsafeBufferPointer { photo in
                        share_card_png_photo(
                            title, appName, content.calories, content.proteinG, content.carbsG, content.fatG,
                            Int32(clamping: content.score), band, photo.baseAddress, photo.count, &output, &length)
                    }
                }
            }
        }
        defer { share_card_free(output) }
        guard status == SHARE_CARD_OK, let bytes = output else { throw ShareCardError(status: Int(status.rawValue)) }
        return Array(UnsafeBufferPointer(start: bytes, count: length))
    }
}

/// Where a process draws its cards, counting each one drawn (`share_cards_drawn_total`).
struct ShareCardPainter: Sendable {
    let pool: NIOThreadPool
    let drawn: @Sendable () -> Void

    func draw(_ content: ShareCard.Content) async throws -> [UInt8] {
        drawn()
        return try await ShareCard.render(content, on: pool)
    }
}

/// Cairo or Pango could not draw or encode the card (in practice: out of memory).
struct ShareCardError: Error, Equatable, CustomStringConvertible {
    /// `share_card_status` from CShareCard.
    var status: Int

    var description: String { "share card drawing failed (status \(status))" }
}
