import Foundation
import Hummingbird
import ServiceKitCore
import Synchronization

/// How many uploads one signed-in user may have in this process at once (`UPLOADS_PER_USER`, 2): a
/// request to one of the service's larger-bodied routes (its `BodyLimits`: a photo's) holds one of
/// the user's slots from before its body is read until its response. Such a body is read whole, up
/// to megabytes, before it is decoded; without the slots one account's concurrent uploads could make
/// the process hold as many of them as the account cared to send. Another user's uploads are not
/// held back by it.
package final class UploadSlots: Sendable {
    package let perUser: Int
    private struct Held {
        var byUser: [UUID: Int] = [:]
        var total = 0
    }
    private let held = Mutex(Held())
    /// Sets the `http_uploads_in_flight` gauge: called under the lock, so that it is set in the
    /// order the counts changed.
    private let record: @Sendable (Int) -> Void

    package init(perUser: Int, registry: MetricsRegistry? = nil) {
        self.perUser = perUser
        if let gauge = registry?.makeGauge(
            descriptor: .init(metricName: "http_uploads_in_flight", unitName: "", helpText: "Uploads to larger-bodied routes being received or handled"))
        {
            record = { gauge.set(Int64($0)) }
        } else {
            record = { _ in }
        }
    }

    /// Takes one of `user`'s slots when they hold fewer than `perUser`; each taken is given back with `giveBack`.
    package func take(_ user: UUID) -> Bool {
        held.withLock { held in
            let mine = held.byUser[user, default: 0]
            guard mine < perUser else { return false }
            held.byUser[user] = mine + 1
            held.total += 1
            record(held.total)
            return true
        }
    }

    package func giveBack(_ user: UUID) {
        held.withLock { held in
            let left = held.byUser[user, default: 1] - 1
            held.byUser[user] = left > 0 ? left : nil
            held.total -= 1
            record(held.total)
        }
    }

    /// Its body is not read: the answer asks the client to end the connection rather than send the
    /// rest of it.
    package static let full: APIError = {
        var error = APIError(
            .tooManyRequests, code: "too_many_uploads", detail: "Your other uploads are still being received or processed; try again when one is done.",
            headers: [.retryAfter: "1"])
        error.headers[.connection] = "close"
        return error
    }()
}

/// Holds one of the caller's `UploadSlots` around a request with a body to a route `routes` names,
/// or answers `429 too_many_uploads` at once. A request without a caller goes on: its route refuses
/// it before reading the body. One without a body (the photo's `GET` and `DELETE`) is no upload.
package struct UploadSlotsMiddleware<Context: IdentifiedRequestContext>: RouterMiddleware {
    let routes: BodyLimits
    let slots: UploadSlots

    package init(routes: BodyLimits, slots: UploadSlots) {
        self.routes = routes
        self.slots = slots
    }

    package func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        guard let user = context.caller?.userID, Self.hasBody(request), routes.lists(request.uri.path) else { return try await next(request, context) }
        guard slots.take(user) else { throw UploadSlots.full }
        defer { slots.giveBack(user) }
        return try await next(request, context)
    }

    /// Whether a body follows the head: a length above 0, or chunks (RFC 9112 §6.3).
    static func hasBody(_ request: Request) -> Bool {
        if let length = request.headers[.contentLength] { return length != "0" }
        return request.headers[.transferEncoding] != nil
    }
}
