import Foundation
import Hummingbird
import NIOCore

/// `GET /openapi.yaml` on a service's public port: the service's own OpenAPI document, shipped in its
/// resource bundle (`ServiceDefinition.openAPIDocument`) and read once, when the application is
/// built. The gateway fetches it from every upstream and merges them into its `GET /openapi.json`.
/// No service's document lists this route (the boot test leaves it out of the comparison).
public struct OpenAPIDocumentRoute: Sendable {
    public static let path = "/openapi.yaml"
    /// RFC 9512's media type for YAML.
    package static let mediaType = "application/yaml; charset=utf-8"

    let document: ByteBuffer

    public init(contentsOf url: URL) throws {
        document = ByteBuffer(bytes: try Data(contentsOf: url))
    }

    public func add<Context: RequestContext>(to router: some RouterMethods<Context>) {
        let document = self.document
        router.get("openapi.yaml") { _, _ -> Response in
            Response(status: .ok, headers: [.contentType: Self.mediaType], body: .init(byteBuffer: document))
        }
    }
}
