import NIOCore
import ServiceKitCore
import Synchronization

/// How much image decoding a process takes on: at most `concurrency` decodes at once
/// (`IMAGE_DECODE_CONCURRENCY`, the number of cores by default), and a decode beyond them is refused
/// at once with `503 image_busy` and `Retry-After` rather than queued, so a burst of uploads cannot
/// pile up work (and the memory each decode holds) behind the ones running; and at most
/// `maxDecodedBytes` of pixels per image (`IMAGE_DECODE_MAX_BYTES`, 64 MiB), counted from its header
/// before any pixel is decoded. So a process holds at most `concurrency × maxDecodedBytes` of decoded
/// pixels. One per process, shared by every route that decodes images (avatars, meal photos).
public final class ImageDecoding: Sendable {
    public static let standardMaxDecodedBytes = 64 << 20

    package let concurrency: Int
    public let maxDecodedBytes: Int
    private let running = Mutex(0)

    public init(concurrency: Int = NIOCore.System.coreCount, maxDecodedBytes: Int = standardMaxDecodedBytes) {
        self.concurrency = concurrency
        self.maxDecodedBytes = maxDecodedBytes
    }

    /// `IMAGE_DECODE_CONCURRENCY` (0 refuses every image) and `IMAGE_DECODE_MAX_BYTES` (a service
    /// whose images come straight from a phone's camera gives a larger default).
    public convenience init(reading env: inout EnvironmentReader, defaultMaxDecodedBytes: Int = standardMaxDecodedBytes) {
        self.init(
            concurrency: env.int("IMAGE_DECODE_CONCURRENCY", default: NIOCore.System.coreCount, range: 0...1_024),
            maxDecodedBytes: env.int("IMAGE_DECODE_MAX_BYTES", default: defaultMaxDecodedBytes, range: (1 << 20)...(1 << 32)))
    }

    /// `work` with one of the process's decode slots, or `503 image_busy` at once when none is free.
    public func withSlot<Result: Sendable>(_ work: () async throws -> Result) async throws -> Result {
        guard take() else { throw Self.busy }
        defer { giveBack() }
        return try await work()
    }

    /// Takes a slot when one is free; each taken slot is given back with `giveBack`.
    package func take() -> Bool {
        running.withLock { running in
            guard running < concurrency else { return false }
            running += 1
            return true
        }
    }

    package func giveBack() {
        running.withLock { $0 -= 1 }
    }

    package static let busy = APIError(
        .serviceUnavailable, code: "image_busy", detail: "The server is decoding as many images as it can right now; try again in a moment.",
        headers: [.retryAfter: "1"])
}
