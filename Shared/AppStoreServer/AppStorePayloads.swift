import Foundation
import JWTKit

/// Where a signed payload was made: Apple's four environments.
public enum AppStoreEnvironment: String, Codable, Sendable, CaseIterable {
    case production = "Production"
    case sandbox = "Sandbox"
    case xcode = "Xcode"
    case localTesting = "LocalTesting"
}

/// A StoreKit 2 transaction as Apple signs it (`JWSTransactionDecodedPayload`), the fields this
/// backend keeps. Apple's dates are milliseconds since 1970.
public struct AppStoreTransaction: JWTPayload, Equatable {
    public var transactionID: String
    public var originalTransactionID: String
    public var bundleID: String
    public var productID: String
    public var purchaseDate: Date
    public var originalPurchaseDate: Date?
    public var expiresDate: Date?
    public var revocationDate: Date?
    public var revocationReason: Int?
    public var appAccountToken: UUID?
    public var environment: AppStoreEnvironment
    public var type: String?
    public var inAppOwnershipType: String?
    public var offerType: Int?
    /// Set on a transaction Apple replaced by an upgrade within its subscription group: it gives
    /// nothing from then on.
    public var isUpgraded: Bool?
    public var signedDate: Date

    public init(
        transactionID: String, originalTransactionID: String, bundleID: String, productID: String, purchaseDate: Date, expiresDate: Date?,
        revocationDate: Date? = nil, revocationReason: Int? = nil, appAccountToken: UUID?, environment: AppStoreEnvironment, type: String? = "Auto-Renewable Subscription",
        inAppOwnershipType: String? = "PURCHASED", offerType: Int? = nil, originalPurchaseDate: Date? = nil, isUpgraded: Bool? = nil, signedDate: Date
    ) {
        self.transactionID = transactionID
        self.originalTransactionID = originalTransactionID
        self.bundleID = bundleID
        self.productID = productID
        self.purchaseDate = purchaseDate
        self.originalPurchaseDate = originalPurchaseDate
        self.expiresDate = expiresDate
        self.revocationDate = revocationDate
        self.revocationReason = revocationReason
        self.appAccountToken = appAccountToken
        self.environment = environment
        self.type = type
        self.inAppOwnershipType = inAppOwnershipType
        self.offerType = offerType
        self.isUpgraded = isUpgraded
        self.signedDate = signedDate
    }

    enum CodingKeys: String, CodingKey {
        case transactionID = "transactionId", originalTransactionID = "originalTransactionId", bundleID = "bundleId", productID = "productId"
        case purchaseDate, originalPurchaseDate, expiresDate, revocationDate, revocationReason, appAccountToken, environment, type, inAppOwnershipType
        case offerType, isUpgraded, signedDate
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        transactionID = try c.decode(String.self, forKey: .transactionID)
        originalTransactionID = try c.decode(String.self, forKey: .originalTransactionID)
        bundleID = try c.decode(String.self, forKey: .bundleID)
        productID = try c.decode(String.self, forKey: .productID)
        purchaseDate = try c.decode(AppleDate.self, forKey: .purchaseDate).date
        originalPurchaseDate = try c.decodeIfPresent(AppleDate.self, forKey: .originalPurchaseDate)?.date
        expiresDate = try c.decodeIfPresent(AppleDate.self, forKey: .expiresDate)?.date
        revocationDate = try c.decodeIfPresent(AppleDate.self, forKey: .revocationDate)?.date
        revocationReason = try c.decodeIfPresent(Int.self, forKey: .revocationReason)
        appAccountToken = try c.decodeIfPresent(String.self, forKey: .appAccountToken).flatMap { UUID(uuidString: $0) }
        environment = try c.decode(AppStoreEnvironment.self, forKey: .environment)
        type = try c.decodeIfPresent(String.self, forKey: .type)
        inAppOwnershipType = try c.decodeIfPresent(String.self, forKey: .inAppOwnershipType)
        offerType = try c.decodeIfPresent(Int.self, forKey: .offerType)
        isUpgraded = try c.decodeIfPresent(Bool.self, forKey: .isUpgraded)
        signedDate = try c.decode(AppleDate.self, forKey: .signedDate).date
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(transactionID, forKey: .transactionID)
        try c.encode(originalTransactionID, forKey: .originalTransactionID)
        try c.encode(bundleID, forKey: .bundleID)
        try c.encode(productID, forKey: .productID)
        try c.encode(AppleDate(purchaseDate), forKey: .purchaseDate)
        try c.encodeIfPresent(originalPurchaseDate.map(AppleDate.init), forKey: .originalPurchaseDate)
        try c.encodeIfPresent(expiresDate.map(AppleDate.init), forKey: .expiresDate)
        try c.encodeIfPresent(revocationDate.map(AppleDate.init), forKey: .revocationDate)
        try c.encodeIfPresent(revocationReason, forKey: .revocationReason)
        try c.encodeIfPresent(appAccountToken?.uuidString.lowercased(), forKey: .appAccountToken)
        try c.encode(environment, forKey: .environment)
        try c.encodeIfPresent(type, forKey: .type)
        try c.encodeIfPresent(inAppOwnershipType, forKey: .inAppOwnershipType)
        try c.encodeIfPresent(offerType, forKey: .offerType)
        try c.encodeIfPresent(isUpgraded, forKey: .isUpgraded)
        try c.encode(AppleDate(signedDate), forKey: .signedDate)
    }

    public func verify(using algorithm: some JWTAlgorithm) async throws {}
}

/// A subscription's renewal state as Apple signs it (`JWSRenewalInfoDecodedPayload`).
public struct AppStoreRenewalInfo: JWTPayload, Equatable {
    public var originalTransactionID: String
    public var productID: String
    public var autoRenewProductID: String?
    public var autoRenewStatus: Int
    public var isInBillingRetryPeriod: Bool?
    public var gracePeriodExpiresDate: Date?
    public var expirationIntent: Int?
    public var environment: AppStoreEnvironment
    public var signedDate: Date

    public init(
        originalTransactionID: String, productID: String, autoRenewProductID: String?, autoRenewStatus: Int, isInBillingRetryPeriod: Bool? = nil,
        gracePeriodExpiresDate: Date? = nil, expirationIntent: Int? = nil, environment: AppStoreEnvironment, signedDate: Date
    ) {
        self.originalTransactionID = originalTransactionID
        self.productID = productID
        self.autoRenewProductID = autoRenewProductID
        self.autoRenewStatus = autoRenewStatus
        self.isInBillingRetryPeriod = isInBillingRetryPeriod
        self.gracePeriodExpiresDate = gracePeriodExpiresDate
        self.expirationIntent = expirationIntent
        self.environment = environment
        self.signedDate = signedDate
    }

    enum CodingKeys: String, CodingKey {
        case originalTransactionID = "originalTransactionId", productID = "productId", autoRenewProductID = "autoRenewProductId", autoRenewStatus
        case isInBillingRetryPeriod, gracePeriodExpiresDate, expirationIntent, environment, signedDate
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        originalTransactionID = try c.decode(String.self, forKey: .originalTransactionID)
        productID = try c.decode(String.self, forKey: .productID)
        autoRenewProductID = try c.decodeIfPresent(String.self, forKey: .autoRenewProductID)
        autoRenewStatus = try c.decode(Int.self, forKey: .autoRenewStatus)
        isInBillingRetryPeriod = try c.decodeIfPresent(Bool.self, forKey: .isInBillingRetryPeriod)
        gracePeriodExpiresDate = try c.decodeIfPresent(AppleDate.self, forKey: .gracePeriodExpiresDate)?.date
        expirationIntent = try c.decodeIfPresent(Int.self, forKey: .expirationIntent)
        environment = try c.decode(AppStoreEnvironment.self, forKey: .environment)
        signedDate = try c.decode(AppleDate.self, forKey: .signedDate).date
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(originalTransactionID, forKey: .originalTransactionID)
        try c.encode(productID, forKey: .productID)
        try c.encodeIfPresent(autoRenewProductID, forKey: .autoRenewProductID)
        try c.encode(autoRenewStatus, forKey: .autoRenewStatus)
        try c.encodeIfPresent(isInBillingRetryPeriod, forKey: .isInBillingRetryPeriod)
        try c.encodeIfPresent(gracePeriodExpiresDate.map(AppleDate.init), forKey: .gracePeriodExpiresDate)
        try c.encodeIfPresent(expirationIntent, forKey: .expirationIntent)
        try c.encode(environment, forKey: .environment)
        try c.encode(AppleDate(signedDate), forKey: .signedDate)
    }

    public func verify(using algorithm: some JWTAlgorithm) async throws {}
}

/// An App Store Server Notification V2 (`ResponseBodyV2DecodedPayload`). `data` is absent for
/// summary notifications; its signed parts are verified on their own.
public struct AppStoreNotification: JWTPayload, Equatable {
    public var notificationType: String
    public var subtype: String?
    public var notificationUUID: String
    public var version: String?
    public var signedDate: Date
    public var data: NotificationData?
    /// In place of `data` for summary notifications (a renewal-date extension's outcome).
    public var summary: AppIdentity?
    /// In place of `data` for external purchase token notifications.
    public var externalPurchaseToken: AppIdentity?

    /// The app fields of a `summary` or `externalPurchaseToken`.
    public struct AppIdentity: Codable, Sendable, Equatable {
        public var bundleID: String
        public var environment: AppStoreEnvironment?
        public var appAppleID: Int64?
        public init(bundleID: String, environment: AppStoreEnvironment?, appAppleID: Int64?) {
            self.bundleID = bundleID
            self.environment = environment
            self.appAppleID = appAppleID
        }
        enum CodingKeys: String, CodingKey { case bundleID = "bundleId", environment, appAppleID = "appAppleId" }
    }

    public struct NotificationData: Codable, Sendable, Equatable {
        public var appAppleID: Int64?
        public var bundleID: String
        public var bundleVersion: String?
        public var environment: AppStoreEnvironment
        public var signedTransactionInfo: String?
        public var signedRenewalInfo: String?
        public var status: Int?

        public init(
            appAppleID: Int64?, bundleID: String, environment: AppStoreEnvironment, signedTransactionInfo: String?, signedRenewalInfo: String?,
            bundleVersion: String? = nil, status: Int? = nil
        ) {
            self.appAppleID = appAppleID
            self.bundleID = bundleID
            self.bundleVersion = bundleVersion
            self.environment = environment
            self.signedTransactionInfo = signedTransactionInfo
            self.signedRenewalInfo = signedRenewalInfo
            self.status = status
        }

        enum CodingKeys: String, CodingKey {
            case appAppleID = "appAppleId", bundleID = "bundleId", bundleVersion, environment, signedTransactionInfo, signedRenewalInfo, status
        }
    }

    public init(notificationType: String, subtype: String?, notificationUUID: String, signedDate: Date, data: NotificationData?, version: String? = "2.0") {
        self.notificationType = notificationType
        self.subtype = subtype
        self.notificationUUID = notificationUUID
        self.version = version
        self.signedDate = signedDate
        self.data = data
    }

    enum CodingKeys: String, CodingKey {
        case notificationType, subtype, notificationUUID, version, signedDate, data, summary, externalPurchaseToken
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        notificationType = try c.decode(String.self, forKey: .notificationType)
        subtype = try c.decodeIfPresent(String.self, forKey: .subtype)
        notificationUUID = try c.decode(String.self, forKey: .notificationUUID)
        version = try c.decodeIfPresent(String.self, forKey: .version)
        signedDate = try c.decode(AppleDate.self, forKey: .signedDate).date
        data = try c.decodeIfPresent(NotificationData.self, forKey: .data)
        summary = try c.decodeIfPresent(AppIdentity.self, forKey: .summary)
        externalPurchaseToken = try c.decodeIfPresent(AppIdentity.self, forKey: .externalPurchaseToken)
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(notificationType, forKey: .notificationType)
        try c.encodeIfPresent(subtype, forKey: .subtype)
        try c.encode(notificationUUID, forKey: .notificationUUID)
        try c.encodeIfPresent(version, forKey: .version)
        try c.encode(AppleDate(signedDate), forKey: .signedDate)
        try c.encodeIfPresent(data, forKey: .data)
        try c.encodeIfPresent(summary, forKey: .summary)
        try c.encodeIfPresent(externalPurchaseToken, forKey: .externalPurchaseToken)
    }

    public func verify(using algorithm: some JWTAlgorithm) async throws {}
}

/// Apple's timestamps: whole milliseconds since 1970.
struct AppleDate: Codable {
    var date: Date
    init(_ date: Date) { self.date = date }
    init(from decoder: any Decoder) throws {
        date = Date(timeIntervalSince1970: Double(try decoder.singleValueContainer().decode(Int64.self)) / 1000)
    }
    func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(Int64((date.timeIntervalSince1970 * 1000).rounded()))
    }
}
