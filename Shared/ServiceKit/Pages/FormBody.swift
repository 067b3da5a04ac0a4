import Foundation
import Hummingbird
import NIOCore

/// Why a page cannot read the form it was sent, with the status and a sentence for the page.
public struct FormBodyError: Error, Sendable, Equatable {
    public var status: HTTPResponse.Status
    public var message: String

    public init(status: HTTPResponse.Status, message: String) {
        self.status = status
        self.message = message
    }
}

/// What the pages' forms post: `application/x-www-form-urlencoded`, read with Hummingbird's
/// `URLEncodedFormDecoder`. As with a JSON body (`StrictJSONBody`), a field the page does not have
/// is refused, and so is a field sent twice or nested (`a[b]=…`): the pages' own forms send neither.
public enum FormBody {
    /// A token and two passwords are well under a kilobyte; the limit keeps a page from reading more.
    public static let maxBytes = 16 * 1024

    /// The fields of the request's form body, each named in `allowed`.
    public static func fields(of request: Request, allowed: Set<String>, maxBytes: Int = FormBody.maxBytes) async throws -> [String: String] {
        guard let type = request.headers[.contentType], type.lowercased().hasPrefix("application/x-www-form-urlencoded") else {
            throw FormBodyError(status: .unsupportedMediaType, message: "The page expected a form (application/x-www-form-urlencoded).")
        }
        let buffer: ByteBuffer
        do {
            buffer = try await request.body.collect(upTo: maxBytes)
        } catch is NIOTooManyBytesError {
            throw FormBodyError(status: .contentTooLarge, message: "The form is larger than this page takes.")
        }
        return try parse(String(buffer: buffer), allowed: allowed)
    }

    /// The fields of a form body's text (`token=abc&password=a+b%21`).
    package static func parse(_ text: String, allowed: Set<String>) throws -> [String: String] {
        let fields: [String: String]
        do {
            fields = try URLEncodedFormDecoder().decode([String: String].self, from: text)
        } catch {
            throw FormBodyError(status: .badRequest, message: "The form could not be read.")
        }
        let unknown = fields.keys.filter { !allowed.contains($0) }.sorted()
        guard unknown.isEmpty else {
            throw FormBodyError(status: .badRequest, message: "The form has fields this page does not know: \(unknown.joined(separator: ", ")).")
        }
        return fields
    }
}
