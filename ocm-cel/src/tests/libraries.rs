//! The libraries: the standard library, strings, optional types and our Kubernetes ones.

use super::*;

#[test]
fn standard_library() {
    assert_all(&[
        (
            "size('abc') == 3 && 'abc'.size() == 3 && size([1, 2]) == 2",
            true,
        ),
        ("'abc'.contains('b') && 'abc'.endsWith('c')", true),
        (
            "int('12') + 1 == 13 && string(12) == '12' && double(1) == 1.0 && uint(1) == 1u",
            true,
        ),
        (
            "bool('true') && bytes('a') == b'a' && dyn(1) == 1 && type('a') == string",
            true,
        ),
        (
            "timestamp('2024-01-02T00:00:00Z').getFullYear() == 2024",
            true,
        ),
        ("duration('1h') > duration('59m')", true),
        (
            "[1, 2, 3].map(x, x * 2) == [2, 4, 6] && [1, 2, 3].filter(x, x > 1) == [2, 3]",
            true,
        ),
        (
            "[1, 2, 3].map(x, x > 1, x * 10) == [20, 30] && [1, 2, 3].exists_one(x, x == 2)",
            true,
        ),
        ("2 in [1, 2] && !(3 in [1, 2]) && {'a': 1}.a == 1", true),
        (
            r#"managedCluster.metadata.name.matches('^c[a-z]+\\d$')"#,
            true,
        ),
        (r#"matches('abc', 'b')"#, true),
        // RE2 semantics: \d is ASCII only.
        (r#"'٣'.matches('^\\d$')"#, false),
        (
            r#"'a b'.matches('a\\sb') && 'x-y'.matches('\\bx\\b')"#,
            true,
        ),
        ("'abc'.matches('[') == false", false),
    ]);
}

#[test]
fn strings_extension() {
    assert_all(&[
        ("'abc'.charAt(1) == 'b'", true),
        (
            "'abcb'.indexOf('b') == 1 && 'abcb'.indexOf('b', 2) == 3",
            true,
        ),
        (
            "'abcb'.lastIndexOf('b') == 3 && 'abcb'.lastIndexOf('b', 2) == 1",
            true,
        ),
        (
            "'AbC'.lowerAscii() == 'abc' && 'AbC'.upperAscii() == 'ABC'",
            true,
        ),
        (
            "'aXbXc'.replace('X', '-') == 'a-b-c' && 'aXbXc'.replace('X', '-', 1) == 'a-bXc'",
            true,
        ),
        (
            "'ab'.replace('', '-') == '-a-b-' && 'aXb'.replace('X', '-', 0) == 'aXb'",
            true,
        ),
        (
            "'a,b,c'.split(',') == ['a', 'b', 'c'] && 'a,b,c'.split(',', 2) == ['a', 'b,c']",
            true,
        ),
        (
            "'abcdef'.substring(2) == 'cdef' && 'abcdef'.substring(1, 3) == 'bc'",
            true,
        ),
        (
            "'  a '.trim() == 'a' && ['a', 'b'].join() == 'ab' && ['a', 'b'].join('-') == 'a-b'",
            true,
        ),
        ("'%s-%d'.format(['a', 1]) == 'a-1'", true),
        ("strings.quote('a\"b') == '\"a\\\\\"b\"'", true),
        ("'abc'.reverse() == 'cba'", true),
    ]);
}

#[test]
fn optional_types() {
    assert_all(&[
        (
            "optional.of(1).hasValue() && optional.of(1).value() == 1",
            true,
        ),
        (
            "!optional.none().hasValue() && !optional.ofNonZeroValue(0).hasValue()",
            true,
        ),
        (
            "optional.none().or(optional.of(2)).value() == 2 && optional.none().orValue(3) == 3",
            true,
        ),
        (
            "managedCluster.metadata.labels.?missing.orValue('none') == 'none'",
            true,
        ),
        (
            "managedCluster.metadata.labels[?'env'].orValue('none') == 'prod'",
            true,
        ),
        (
            "[?optional.none(), ?optional.of(1)] == [1] && {?'a': optional.none()} == {}",
            true,
        ),
        ("optional.of(2).optMap(x, x * 2).value() == 4", true),
        (
            "optional.of(2).optFlatMap(x, optional.of(x + 1)).value() == 3",
            true,
        ),
        (
            "[1, 2].first().value() == 1 && [1, 2].last().value() == 2 && ![].first().hasValue()",
            true,
        ),
        (
            "optional.unwrap([optional.of(1), optional.none()]) == [1]",
            true,
        ),
        ("[optional.of(1), optional.none()].unwrapOpt() == [1]", true),
    ]);
}

#[test]
fn kubernetes_lists() {
    assert_all(&[
        (
            "[1, 2, 2, 3].isSorted() && !['b', 'a'].isSorted() && [].isSorted()",
            true,
        ),
        (
            "[1, 3].sum() == 4 && [1.0, 2.5].sum() == 3.5 && [].sum() == 0",
            true,
        ),
        (
            "[3, 1, 2].min() == 1 && [3, 1, 2].max() == 3 && ['b', 'a'].min() == 'a'",
            true,
        ),
        ("[].min() == 0", false),
        (
            "[1, 2, 2, 3].indexOf(2) == 1 && [1, 2, 2, 3].lastIndexOf(2) == 2 && [1].indexOf(5) == -1",
            true,
        ),
    ]);
}

#[test]
fn quantity() {
    assert_all(&[
        (
            "quantity(managedCluster.status.allocatable.memory).isGreaterThan(quantity('16Gi'))",
            true,
        ),
        (
            "quantity('200M').compareTo(quantity('0.2G')) == 0 && quantity('50M').compareTo(quantity('50Mi')) == -1",
            true,
        ),
        (
            "quantity('50M').isLessThan(quantity('100M')) && quantity('1k') == quantity('1000')",
            true,
        ),
        (
            "isQuantity('1.3Gi') && !isQuantity('200K') && !isQuantity('Three')",
            true,
        ),
        (
            "quantity('50k').add(quantity('20k')) == quantity('70k') && quantity('50k').add(20) == quantity('50020')",
            true,
        ),
        (
            "quantity('50k').sub(quantity('20k')) == quantity('30k') && quantity('50k').sub(20000) == quantity('30k')",
            true,
        ),
        (
            "quantity('50k').asInteger() == 50000 && quantity('50k').isInteger() && !quantity('1.5').isInteger()",
            true,
        ),
        (
            "quantity('50k').sub(20000).asApproximateFloat() == 30000.0",
            true,
        ),
        (
            "sign(quantity('-1')) == -1 && quantity('0').sign() == 0",
            true,
        ),
        ("quantity('1.5').asInteger() == 1", false),
        ("quantity('Three') == quantity('3')", false),
    ]);
}

#[test]
fn semver() {
    assert_all(&[
        (
            "semver(managedCluster.status.version.kubernetes, true).isGreaterThan(semver('1.30.0'))",
            true,
        ),
        (
            "semver(managedCluster.status.version.kubernetes, true).isLessThan(semver('1.31.0'))",
            true,
        ),
        (
            "semver('1.2.3').compareTo(semver('1.2.3')) == 0 && semver('1.2.3').compareTo(semver('2.0.0')) == -1",
            true,
        ),
        (
            "semver('1.2.3').major() == 1 && semver('1.2.3').minor() == 2 && semver('1.2.3').patch() == 3",
            true,
        ),
        (
            "isSemver('1.0.0') && !isSemver('v1.0') && isSemver('v1.0', true) && !isSemver('1.0', false)",
            true,
        ),
        ("semver('1.0.0+a') == semver('1.0.0+b')", true),
        // Without normalization a leading `v` is an error.
        (
            "semver(managedCluster.status.version.kubernetes).major() == 1",
            false,
        ),
    ]);
}

#[test]
fn ip_and_cidr() {
    assert_all(&[
        (
            "ip('127.0.0.1').family() == 4 && ip('::1').family() == 6",
            true,
        ),
        (
            "isIP('::1') && !isIP('127.0.0.256') && !isIP('::ffff:1.2.3.4')",
            true,
        ),
        (
            "ip.isCanonical('2001:db8::abcd') && !ip.isCanonical('2001:DB8::ABCD')",
            true,
        ),
        (
            "ip('0.0.0.0').isUnspecified() && ip('::1').isLoopback()",
            true,
        ),
        (
            "ip('224.0.0.1').isLinkLocalMulticast() && ip('ff02::1').isLinkLocalMulticast()",
            true,
        ),
        (
            "ip('169.254.169.254').isLinkLocalUnicast() && ip('fe80::1').isLinkLocalUnicast()",
            true,
        ),
        (
            "ip('192.168.0.1').isGlobalUnicast() && !ip('255.255.255.255').isGlobalUnicast()",
            true,
        ),
        (
            "string(ip('::1')) == '::1' && ip('10.0.0.1') == ip('10.0.0.1')",
            true,
        ),
        (
            "cidr('192.168.0.0/24').containsIP(ip('192.168.0.1')) && !cidr('192.168.0.0/24').containsIP('192.168.1.1')",
            true,
        ),
        (
            "cidr('192.168.0.0/16').containsCIDR(cidr('192.168.10.0/24')) && !cidr('192.168.1.0/24').containsCIDR('192.168.2.0/24')",
            true,
        ),
        (
            "cidr('192.168.0.1/24').ip() == ip('192.168.0.1') && cidr('192.168.0.1/24').masked() == cidr('192.168.0.0/24')",
            true,
        ),
        (
            "cidr('::1/128').prefixLength() == 128 && string(cidr('10.0.0.0/8')) == '10.0.0.0/8'",
            true,
        ),
        (
            "isCIDR('192.168.0.0/16') && !isCIDR('192.168.0.0/33')",
            true,
        ),
    ]);
}

#[test]
fn parse_json() {
    assert_all(&[
        (
            "managedCluster.metadata.annotations.config.parseJSON().zones == ['a', 'b']",
            true,
        ),
        (
            "managedCluster.metadata.annotations.config.parseJSON().gpu",
            true,
        ),
        // Numbers are doubles, as Go's json.Unmarshal makes them.
        (
            "'{\"n\": 1}'.parseJSON().n == 1.0 && type('{\"n\": 1}'.parseJSON().n) == double",
            true,
        ),
        ("'not json'.parseJSON() == {}", false),
    ]);
}
