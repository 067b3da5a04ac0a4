// A service writes `import ServiceKit` and sees the whole kit: its layers and the shared models, as
// Hummingbird's own Exports.swift does for its modules. The layers stay targets of their own, each
// importing only the layers it declares, so a wrong-way import inside the kit still fails to build.
// This is the one place an underscored attribute is allowed.
@_exported import Models
@_exported import ServiceKitCore
@_exported import ServiceKitDatabase
@_exported import ServiceKitEvents
@_exported import ServiceKitHTTP
@_exported import ServiceKitPages
@_exported import ServiceKitRedis
@_exported import ServiceKitTokens
