import Hummingbird
import Models
import NIOCore
import ServiceKitCore

/// The registry in Prometheus's text exposition format.
public func metricsResponse(_ registry: MetricsRegistry) -> Response {
    var buffer: [UInt8] = []
    registry.emit(into: &buffer)
    return Response(status: .ok, headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8"], body: .init(byteBuffer: ByteBuffer(bytes: buffer)))
}

/// A JSON response in the API's format with any status.
public func jsonResponse(_ value: some Encodable, status: HTTPResponse.Status = .ok, headers: HTTPFields = [:]) throws -> Response {
    var headers = headers
    headers[.contentType] = "application/json; charset=utf-8"
    return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: try APIJSON.encode(value))))
}
